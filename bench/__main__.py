import os
import sys

from bench.cli import main

try:
    code = main()
    sys.stdout.flush()  # here, where a reader that stopped is caught, rather than in the interpreter's exit
except BrokenPipeError:  # `python -m bench --list | head`: the reader stopped reading, which is no error here
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's own flush does not fail
    code = 1
sys.exit(code)
