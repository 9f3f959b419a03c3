#!/usr/bin/env python3
"""Rebuilds the parity corpus from freely redistributable text found on a Debian machine with Python 3.11.

Sources (each file's header line names its origin):
  glibc locale data (public domain: "The Free Software Foundation does not claim any copyright interest"),
  decoded from <Uxxxx> escapes into native scripts; CPython's test/cjkencodings samples and stdlib source (PSF
  license); C headers (zlib license, MIT); a Perl script (valgrind, GPL); GNU license text (verbatim copying
  permitted). edge_cases.txt and snippets.json are written for this project.
Run from anywhere: python3 tools/tokenizer_corpus/assemble_corpus.py
"""
import pathlib
import re
import sys
import sysconfig

HERE = pathlib.Path(__file__).resolve().parent
STDLIB = pathlib.Path(sysconfig.get_paths()["stdlib"])
LOCALES = ["ru_RU", "uk_UA", "el_GR", "ar_SA", "he_IL", "hi_IN", "bn_BD", "ta_IN", "th_TH", "ka_GE", "hy_AM",
           "am_ET", "ja_JP", "ko_KR", "zh_CN", "vi_VN", "tr_TR", "de_DE", "fr_FR"]


def decode_locale(text: str) -> str:
    return re.sub(r"<U([0-9A-Fa-f]{4,8})>", lambda m: chr(int(m.group(1), 16)), text)


def write(name: str, origin: str, body: str, limit: int) -> None:
    body = body[:limit]
    (HERE / name).write_text(f"[source: {origin}]\n{body}", encoding="utf-8", newline="")


def main() -> int:
    for loc in LOCALES:
        src = pathlib.Path("/usr/share/i18n/locales") / loc
        write(f"locale_{loc}.txt", f"glibc locale {loc}, <U> escapes decoded", decode_locale(src.read_text("utf-8")), 9000)
    cjk = STDLIB / "test" / "cjkencodings"
    for name in ["big5", "gb2312", "euc_jp", "euc_kr"]:
        write(f"cjk_{name}.txt", f"CPython Lib/test/cjkencodings/{name}-utf8.txt", (cjk / f"{name}-utf8.txt").read_text("utf-8"), 4000)
    write("code_python_textwrap.py.txt", "CPython Lib/textwrap.py", (STDLIB / "textwrap.py").read_text("utf-8"), 20000)
    write("code_c_zlib.h.txt", "/usr/include/zlib.h (zlib license)", pathlib.Path("/usr/include/zlib.h").read_text("latin-1"), 20000)
    write("code_c_utf8proc.h.txt", "/usr/include/utf8proc.h (MIT)", pathlib.Path("/usr/include/utf8proc.h").read_text("utf-8"), 12000)
    write("code_perl_c_rehash.txt", "/usr/bin/c_rehash (OpenSSL license)", pathlib.Path("/usr/bin/c_rehash").read_text("utf-8"), 8000)
    # CRLF line endings on purpose: the same license text with Windows newlines.
    gpl = pathlib.Path("/usr/share/common-licenses/GPL-3").read_text("utf-8")
    write("prose_gpl3_lf.txt", "/usr/share/common-licenses/GPL-3", gpl, 20000)
    write("prose_gpl3_crlf.txt", "/usr/share/common-licenses/GPL-3 with CRLF newlines", gpl[:12000].replace("\n", "\r\n"), 14000)
    total = sum(p.stat().st_size for p in HERE.iterdir() if p.suffix in (".txt", ".json"))
    print(f"corpus: {total / 1024:.0f} KiB in {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
