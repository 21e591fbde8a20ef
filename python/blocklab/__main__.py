"""The ``blocklab`` command of an installed package (and ``python -m blocklab``): the CLI that ships in the
package, blocklab/bin/blocklab, run with the same arguments."""
import os
import sys


def main() -> None:
    cli = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "blocklab")
    if not os.access(cli, os.X_OK):
        sys.exit(f"blocklab: the command-line program is missing from the package ({cli})")
    os.execv(cli, [cli, *sys.argv[1:]])


if __name__ == "__main__":
    main()
