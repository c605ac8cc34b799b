#!/usr/bin/env python3
"""Count the crate's public items from rustdoc's JSON output.

    cargo +nightly rustdoc --lib --all-features -- -Z unstable-options --output-format json
    python3 scripts/public_items.py target/doc/pd_stitch.json

An item is public when rustdoc lists it in `paths` under this crate (crate id
0): modules, types, traits, functions, constants, statics, macros and type
aliases, each counted at every path it can be named by (a re-export is a
second way to name a thing, which is what this count is for). Methods, variants
and fields are counted on their own line.
"""
import json
import sys
from collections import Counter

TOP = {"module", "struct", "enum", "trait", "function", "constant", "static", "macro", "type_alias", "union"}


def main(path):
    doc = json.load(open(path))
    index = doc["index"]
    names = Counter()
    # Every public path an item can be reached by: walk the public modules.
    def walk(module_id, prefix):
        item = index[str(module_id)] if str(module_id) in index else index[module_id]
        for child in item["inner"]["module"]["items"]:
            child_item = index.get(str(child)) or index.get(child)
            if child_item is None:
                continue
            inner = child_item["inner"]
            kind = next(iter(inner))
            name = child_item.get("name")
            if kind == "use":
                use = inner["use"]
                target = use.get("id")
                target_item = index.get(str(target)) if target is not None else None
                if target_item is None:
                    continue
                kind = next(iter(target_item["inner"]))
                if use.get("is_glob"):
                    continue
                name = use["name"]
                child_item = target_item
            if child_item.get("visibility") not in ("public", None) and kind != "module":
                continue
            if kind in TOP:
                names[kind] += 1
                yield f"{prefix}::{name}"
            if kind == "module":
                yield from walk(child_item["id"], f"{prefix}::{name}")
    paths = sorted(walk(doc["root"], "pd_stitch"))
    methods = 0
    for item in index.values():
        if item.get("crate_id") == 0 and "impl" in item["inner"]:
            impl = item["inner"]["impl"]
            if impl.get("trait") is None:
                for m in impl["items"]:
                    mi = index.get(str(m))
                    if mi and mi.get("visibility") == "public" and "function" in mi["inner"]:
                        methods += 1
    for p in paths:
        print(p)
    print(f"public items: {len(paths)} ({', '.join(f'{k} {v}' for k, v in sorted(names.items()))}); inherent public methods: {methods}")


if __name__ == "__main__":
    main(sys.argv[1])
