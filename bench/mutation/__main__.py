import sys

from bench.mutation.run import main

sys.exit(main())
