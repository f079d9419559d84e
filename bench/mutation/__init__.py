"""Mutation testing of the contract suite (``make mutation``): see :mod:`bench.mutation.run` and MUTATION.md."""
