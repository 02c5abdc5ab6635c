"""Export pykakasi 2.3's kanji dictionaries to the text form `chatterbox_kakasi::KakasiDict` reads.

    python export_pykakasi_dict.py OUT.tsv

pykakasi (GPL-3.0-or-later) keeps `kanwadict4.db` and `itaijidict4.db` as pickles in its package
data; chatterbox-kakasi does not ship them. The output holds every itaiji mapping and every kanwa
entry, in pickle order (about 7 MB); it is GPL-3.0-or-later data, like its source. `export(out,
keep=...)` writes a subset: only kanwa words for which `keep(word)` is true (the parity recorder,
parity/recorders/kakasi.py, keeps the words that occur in its corpus).

SPDX-License-Identifier: GPL-3.0-or-later
"""
import os
import pickle
import sys


def _data_dir():
    import pykakasi

    return os.path.join(os.path.dirname(pykakasi.__file__), "data")


def load():
    d = _data_dir()
    with open(os.path.join(d, "itaijidict4.db"), "rb") as f:
        itaiji = pickle.load(f)
    with open(os.path.join(d, "kanwadict4.db"), "rb") as f:
        kanwa = pickle.load(f)
    return itaiji, kanwa


def _check(field):
    assert "\t" not in field and "\n" not in field and "\r" not in field, repr(field)
    return field


def export(out, keep=None):
    from importlib import metadata

    itaiji, kanwa = load()
    n = 0
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write(f"# chatterbox-kakasi dictionary v1, from pykakasi {metadata.version('pykakasi')} "
                "(GPL-3.0-or-later)\n")
        for code, repl in itaiji.items():
            f.write(f"I\t{code:x}\t{_check(repl or '')}\n")
        for _first, table in kanwa.items():
            for word, readings in table.items():
                if keep is not None and not keep(word):
                    continue
                for yomi, con in readings:
                    if con is None:
                        f.write(f"K\t{_check(word)}\t{_check(yomi)}\n")
                    else:
                        ctx = "\t".join(_check(c) for c in con)
                        f.write(f"C\t{_check(word)}\t{_check(yomi)}\t{ctx}\n")
                    n += 1
    return n


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(f"{export(sys.argv[1])} readings -> {sys.argv[1]}")
