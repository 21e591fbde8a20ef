#!/usr/bin/env python3
"""po/ko.po -> a JSON object {msgid: msgstr} for the browser page (entries with a msgctxt are keyed
"msgctxt\\u0004msgid", as gettext keys them). Usage: po2json.py IN.po OUT.json"""
import ast
import json
import sys


def entries(lines):
    entry, field = {}, None
    for raw in lines + [""]:
        line = raw.strip()
        if not line or line.startswith("#"):
            if "msgid" in entry:
                yield entry
            if not line:
                entry, field = {}, None
            continue
        if line.startswith('"'):
            entry[field] += ast.literal_eval(line)
            continue
        field, _, value = line.partition(" ")
        entry[field] = ast.literal_eval(value)


def main():
    source, target = sys.argv[1:3]
    with open(source, encoding="utf-8") as f:
        lines = f.read().splitlines()
    catalog = {}
    for e in entries(lines):
        if not e["msgid"] or not e.get("msgstr"):
            continue  # the header, or an untranslated entry
        key = e["msgid"] if "msgctxt" not in e else e["msgctxt"] + "\u0004" + e["msgid"]
        catalog[key] = e["msgstr"]
    with open(target, "w", encoding="utf-8") as f:
        json.dump(catalog, f, ensure_ascii=False, indent=0, sort_keys=True)
    print(f"{target}: {len(catalog)} entries")


if __name__ == "__main__":
    main()
