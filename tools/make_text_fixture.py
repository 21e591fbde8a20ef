#!/usr/bin/env python3
"""Regenerates tests/data/web_ruth_jonah.txt: the books of Ruth and Jonah from the World English Bible
(public domain), as shipped by Debian's sword-text-web package (a SWORD zText module of OSIS markup).

    apt-get download sword-text-web && dpkg-deb -x sword-text-web_*.deb pkg
    python3 tools/make_text_fixture.py pkg/usr/share/sword/modules/texts/ztext/engWEB2015eb > tests/data/web_ruth_jonah.txt

A zText module stores each book as one zlib block: ot.bzs holds (offset, size, uncompressed size) as three
little-endian u32 per block, ot.bzz the compressed blocks. The markup is reduced to plain text: footnotes
dropped, words and punctuation kept, a blank line between paragraphs, a heading per chapter.
"""
import re
import struct
import sys
import zlib

BOOKS = [("Ruth", "Ruth"), ("Jonah", "Jonah")]


def blocks(module_dir, testament):
    index = open(f"{module_dir}/{testament}.bzs", "rb").read()
    data = open(f"{module_dir}/{testament}.bzz", "rb").read()
    for i in range(len(index) // 12):
        offset, size, _ = struct.unpack("<III", index[12 * i:12 * i + 12])
        yield zlib.decompress(data[offset:offset + size]).decode("utf-8")


def plain(markup, title):
    text = re.sub(r"<note\b.*?</note>", "", markup, flags=re.S)
    text = re.sub(r"<title\b.*?</title>", "", text, flags=re.S)
    text = text.replace("</w><w", "</w> <w")  # two words whose space stood in a dropped footnote
    text = re.sub(r'<chapter\b[^>]*\bn="(\d+)"[^>]*/>', lambda m: f"\n\n{title} {m.group(1)}\n\n", text)
    text = re.sub(r'<div\b[^>]*type="x-p"[^>]*/>', "\n\n", text)
    text = re.sub(r"<[^>]*>", "", text)
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    return "\n\n".join(p for p in paragraphs if p)


def main():
    module_dir = sys.argv[1]
    books = {}
    for markup in blocks(module_dir, "ot"):
        m = re.search(r'osisID="([^"]+)"[^>]*type="book"', markup)
        if m:
            books[m.group(1)] = markup
    out = []
    for osis, title in BOOKS:
        out.append(f"The Book of {title}\n\n" + plain(books[osis], title))
    sys.stdout.write("\n\n\n".join(out) + "\n")


if __name__ == "__main__":
    main()
