import os
import sys


def _run() -> int:
    if sys.argv[1:2] == ["serve"]:  # `python -m bench serve ...`: the serving benchmark
        from bench.serve_cli import main

        return main(sys.argv[2:])
    from bench.cli import main

    return main()


try:
    code = _run()
    sys.stdout.flush()  # here, where a reader that stopped is caught, rather than in the interpreter's exit
except BrokenPipeError:  # `python -m bench --list | head`: the reader stopped reading, which is no error here
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's own flush does not fail
    code = 1
sys.exit(code)
