"""Builds the package: CMake compiles the extension nanovllm._core together with the engine (C++ and, where nvcc is
found, CUDA), setuptools packages it with the Python sources.

Environment:
  NANOVLLM_CMAKE_BUILD_DIR  an already configured build folder to take the extension from (it is brought up to
                            date there); without it a fresh one is configured under setuptools' build_temp.
  CMAKE_ARGS                extra configure arguments, e.g. "-DNANOVLLM_CUDA=OFF" for a CPU-only build.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

REPO = Path(__file__).resolve().parent.parent


def project_version() -> str:
    """The version of the CMake project, so that the package and the library never disagree."""
    match = re.search(r"project\(nanovllm\s+VERSION\s+([0-9.]+)", (REPO / "CMakeLists.txt").read_text())
    if not match:
        raise RuntimeError("no 'project(nanovllm VERSION x.y.z' in CMakeLists.txt")
    return match.group(1)


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = os.environ.get("NANOVLLM_CMAKE_BUILD_DIR")
        if build_dir:
            build_dir = Path(build_dir).resolve()
            if not (build_dir / "CMakeCache.txt").exists():
                raise RuntimeError(f"NANOVLLM_CMAKE_BUILD_DIR={build_dir} is not a configured CMake build folder")
        else:
            build_dir = Path(self.build_temp).resolve() / "cmake"
            self.configure(build_dir)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "nanovllm_python", "-j", jobs], check=True)

        path_file = build_dir / "python" / "extension_path.txt"
        if not path_file.exists():
            raise RuntimeError(f"the build in {build_dir} has no Python extension: configure it with "
                               "-DNANOVLLM_PYTHON=ON (needs python3-dev and pybind11-dev)")
        built = Path(path_file.read_text().strip())
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        if not built.name.endswith(suffix):
            raise RuntimeError(f"{built} was built for another Python than {sys.executable} (wants *{suffix}); "
                               "configure the build with -DPython_EXECUTABLE=" + sys.executable)
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)

    def configure(self, build_dir: Path) -> None:
        command = ["cmake", "-S", str(REPO), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                   "-DBUILD_TESTING=OFF", "-DNANOVLLM_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            command += ["-G", "Ninja"]
        command += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(command, check=True)


setup(version=project_version(), ext_modules=[CMakeExtension("nanovllm._core")], cmdclass={"build_ext": CMakeBuild})
