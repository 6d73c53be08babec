#!/usr/bin/env bash
# Debian packages some tests drive for real: Chromium for the web UI test (through Playwright,
# never a downloaded browser), Tesseract for the OCR tests, LibreOffice (Writer, Calc, Impress)
# for the legacy .doc/.xls/.ppt tests and ffmpeg for the video tests. Installs what is missing
# when we may; otherwise those tests skip and say why.
set -u
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v tesseract >/dev/null 2>&1 || missing+=(tesseract-ocr)
lo=/usr/lib/libreoffice/program
[ -e "$lo/libswlo.so" ] || missing+=(libreoffice-writer-nogui)
[ -e "$lo/libsclo.so" ] || missing+=(libreoffice-calc-nogui)
[ -e "$lo/libslideshowlo.so" ] || missing+=(libreoffice-impress-nogui)
command -v ffmpeg >/dev/null 2>&1 || missing+=(ffmpeg)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's ${missing[*]} for the browser, OCR, legacy Office and video tests" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") \
    >/dev/null 2>&1 || echo "could not install ${missing[*]}; those tests will be skipped" >&2
else
  echo "missing ${missing[*]} and no root apt-get; the browser/OCR/Office/video tests will be skipped" >&2
fi
exit 0
