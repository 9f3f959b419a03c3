# The installable library: `cmake --install` puts libnanovllm.so, include/nanovllm/ and a CMake package plus a
# pkg-config file in place, so that an outside project needs only `find_package(nanovllm)` and
# `target_link_libraries(app nanovllm::nanovllm)` (or `pkg-config --cflags --libs nanovllm`).
#
# One shared library holds the engine (the objects of the `nanovllm` target plus whatever they pull from the
# internal static libraries); it links its own dependencies (OpenBLAS, OpenMP, the CUDA runtime and cuBLASLt
# when built with CUDA), so a consumer links nothing else and include/nanovllm/ is its whole interface.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_library(nanovllm_shared SHARED $<TARGET_OBJECTS:nanovllm>)
add_library(nanovllm::nanovllm ALIAS nanovllm_shared)
target_link_libraries(nanovllm_shared PRIVATE nanovllm)
target_include_directories(nanovllm_shared INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                                     $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(nanovllm_shared INTERFACE cxx_std_20)
set_target_properties(nanovllm_shared PROPERTIES
  OUTPUT_NAME nanovllm
  EXPORT_NAME nanovllm
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  # Dependencies outside the system paths (the CUDA toolkit's lib64/) stay findable after installation.
  INSTALL_RPATH_USE_LINK_PATH TRUE)
# The static third-party libraries inside stay private: a consumer's own PCRE2 or utf8proc cannot clash.
get_filename_component(pcre2_archive ${PCRE2_LIB} NAME)
get_filename_component(utf8proc_archive ${UTF8PROC_LIB} NAME)
target_link_options(nanovllm_shared PRIVATE "LINKER:--exclude-libs,${pcre2_archive}:${utf8proc_archive}")

install(TARGETS nanovllm_shared EXPORT nanovllmTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/nanovllm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

set(nanovllm_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/nanovllm)
install(EXPORT nanovllmTargets NAMESPACE nanovllm:: DESTINATION ${nanovllm_cmake_dir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/nanovllmConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/nanovllmConfig.cmake INSTALL_DESTINATION ${nanovllm_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/nanovllmConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/nanovllmConfig.cmake ${PROJECT_BINARY_DIR}/nanovllmConfigVersion.cmake
        DESTINATION ${nanovllm_cmake_dir})

# Relocatable: the prefix is found from the .pc file's own place, so `cmake --install --prefix DIR` works.
file(RELATIVE_PATH pkgconfig_to_prefix /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${CMAKE_CURRENT_LIST_DIR}/nanovllm.pc.in ${PROJECT_BINARY_DIR}/nanovllm.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/nanovllm.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The `nanovllm` command beside the library.
set_target_properties(nanovllm_cli PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS nanovllm_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
