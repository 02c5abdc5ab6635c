"""The ``chatterbox`` command the wheel installs: crates/chatterbox-cli's code, run from the
native module (``chatterbox speak``, ``vc``, ``serve``, ``watermark``; ``--help`` lists them)."""
import sys

from . import _native


def main():
    sys.exit(_native.cli_main(sys.argv))


if __name__ == "__main__":
    main()
