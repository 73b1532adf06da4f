import sys

if sys.argv[1:2] == ["serve"]:  # `python -m bench serve ...`: the serving benchmark
    from bench.serve_cli import main

    sys.exit(main(sys.argv[2:]))
from bench.cli import main

sys.exit(main())
