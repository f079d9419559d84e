"""Mutation testing of the contract suite (``make mutation``): see :mod:`tests.mutation.run` and MUTATION.md."""
