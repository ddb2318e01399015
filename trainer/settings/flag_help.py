"""The help of every trainer flag, read from trainer/settings/config.py's own DEFAULTS block.

The comment beside each default is its description and the "# --- Title. ---" banners
are the groups of --help: one source of truth, so a new setting documents itself
where its default and reason are written.

    .venv/bin/python -m trainer.settings.flag_help     # print the groups and their flags
"""
import importlib.resources
import re
import sys

BANNER = re.compile(r"^\s*# --- (?P<title>[^.:(]+).*---\s*$")
ENTRY = re.compile(r'^\s*"(?P<key>\w+)":[^#]*(#\s*(?P<help>.*))?$')
CONTINUATION = re.compile(r"^\s*#\s*(?P<help>(?!---).*)$")


def read_flag_docs():
    """[(group title, [(key, help), ...]), ...] in the order of DEFAULTS."""
    source = importlib.resources.files("trainer").joinpath("config.py").read_text(encoding="utf-8")
    lines = source.split("\nDEFAULTS = {\n", 1)[1].split("\n}\n", 1)[0].splitlines()
    groups, entries = [], None
    for line in lines:
        banner, entry = BANNER.match(line), ENTRY.match(line)
        if banner:
            entries = []
            groups.append((banner["title"].strip(), entries))
        elif entry and entries is not None:
            entries.append((entry["key"], (entry["help"] or "").strip()))
        elif CONTINUATION.match(line) and entries:
            key, text = entries[-1]
            entries[-1] = (key, f"{text} {CONTINUATION.match(line)['help'].strip()}")
    return groups


def main():
    for title, entries in read_flag_docs():
        print(title)
        for key, text in entries:
            print(f"  --{key}: {text}")


if __name__ == "__main__":
    main()
