"""Record parity fixtures from the Python reference. Run by `cargo xtask parity --record`.

    parity/.venv/bin/python parity/record.py [--only NAME] [--seed N] [--out DIR] [--full]
"""
import argparse
import importlib
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import Recorder  # noqa: E402

# One module per component under parity/recorders/, each with `COMPONENT` and `record(rec)`;
# every module there is run, in name order.
RECORDERS = sorted(f[:-3] for f in os.listdir(os.path.join(HERE, "recorders"))
                   if f.endswith(".py") and not f.startswith("_"))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", default=None, help="component, kind, component/case prefix or case prefix")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(HERE, "fixtures"))
    p.add_argument("--full", action="store_true", help="also record full-size cases (never commit)")
    a = p.parse_args()
    torch.set_num_threads(2)
    rec = Recorder(a.out, a.seed, a.only, a.full)
    t0 = time.time()
    mods = [importlib.import_module(f"recorders.{name}") for name in RECORDERS]
    # `--only COMPONENT[/case]` runs that component's recorder alone; a kind or case prefix
    # runs every recorder and each keeps the cases `rec.want` selects.
    head = (a.only or "").split("/")[0]
    if head in {m.COMPONENT for m in mods}:
        mods = [m for m in mods if m.COMPONENT == head]
    for mod in mods:
        print(f"[{mod.COMPONENT}]", flush=True)
        torch.manual_seed(a.seed)
        mod.record(rec)
    total = sum(s for _, _, s in rec.written)
    print(f"{len(rec.written)} cases, {total / 2**20:.2f} MiB, {time.time() - t0:.1f} s -> {a.out}")
    if not rec.written:
        print("nothing recorded: check --only", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
