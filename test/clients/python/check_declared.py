"""Every distribution the installed kxmhub library imports is one kxm-hub-client declares.

Run with the Python of a venv where the client's wheel is installed; prints each imported
top-level module with its distribution, and exits 1 naming any import that only works because
another package happened to bring its distribution along.
"""

import ast
import importlib.metadata as md
import pathlib
import re
import sys

import kxmhub


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


declared = {canonical(re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0]) for r in md.requires("kxm-hub-client") or []}
providers = md.packages_distributions()
own = {"kxmhub"}

imported: set[str] = set()
for file in pathlib.Path(kxmhub.__file__).parent.rglob("*.py"):
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])

missing = []
for module in sorted(imported - own - set(sys.stdlib_module_names) - {"__future__"}):
    dists = {canonical(d) for d in providers.get(module, [])}
    print(f"{module}: {', '.join(sorted(dists)) or '(no distribution)'}")
    if not dists & declared:
        missing.append(module)
if missing:
    print(f"imported but not declared by kxm-hub-client: {', '.join(missing)}")
    sys.exit(1)
print("every import declared")
