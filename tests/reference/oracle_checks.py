"""The command line and PASS/FAIL loop the `tessera kernel` oracles share."""
import argparse
import sys
import tempfile


def main(make_checks):
    """Parses --tessera, calls make_checks(tessera, tmp_dir) for (name, fn) pairs (fn()
    returns None on success or a failure message; a RuntimeError fails with its text), runs
    them, printing one line each and `N passed, M failed`; exits 1 on any failure, else 0."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in make_checks(args.tessera, tmp):
            try:
                msg = fn()
            except RuntimeError as e:
                msg = str(e)
            if msg is None:
                passed += 1
                print(f"PASS {name}")
            else:
                failed += 1
                print(f"FAIL {name}: {msg}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
