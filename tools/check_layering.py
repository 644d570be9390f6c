#!/usr/bin/env python3
"""Fails when a file under src/<module>/ includes a project header from a module it may not
depend on. The allowed edges are docs/architecture.md's table; CMake cannot enforce them.

Usage: check_layering.py [REPO_ROOT]
"""
import pathlib
import re
import sys

# module -> modules it may include (transitively closed below).
ALLOWED = {
    "base": set(),
    "tensor": {"base"},
    "kernels": {"tensor"},
    "io": {"tensor"},
    "distributed": {"tensor"},
    "tokenizer": {"io"},
    "chat": {"io"},
    "layers": {"kernels", "distributed"},
    "models": {"layers", "io"},
    "worker": {"models", "distributed"},
    "engine": {"worker", "tokenizer"},
    "probe": {"engine", "models", "io"},
    "convert": {"models", "tokenizer"},
    "apps": {"probe", "engine", "chat", "convert"},
}


def closure(module, seen=None):
    seen = set() if seen is None else seen
    for dep in ALLOWED.get(module, ()):
        if dep not in seen:
            seen.add(dep)
            closure(dep, seen)
    return seen


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    src = root / "src"
    include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
    errors = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cc", ".cu") or not path.is_file():
            continue
        module = path.relative_to(src).parts[0]
        if module not in ALLOWED:
            errors.append(f"{path.relative_to(root)}: module '{module}' is not in the layering table")
            continue
        allowed = closure(module) | {module}
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = include.match(line)
            if m and m.group(1) in ALLOWED and m.group(1) not in allowed:
                errors.append(f"{path.relative_to(root)}:{lineno}: '{module}' may not include "
                              f"'{m.group(1)}/' (allowed: {', '.join(sorted(allowed))})")
    for e in errors:
        print(e)
    print(f"checked layering: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
