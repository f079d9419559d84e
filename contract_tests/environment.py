"""The environment variables the contract suite reads (a flag always wins over its variable).

A CI job can configure a run without flags; the ``TOGETHER_*`` variables are the SDK's own, so a job that
already points the SDK at a target runs the suite against it too. Kept apart from the plugin so that
``together-rl-contract --help`` lists them without importing pytest.
"""

ENVIRONMENT = {
    "CONTRACT_BASE_URL": "--base-url",
    "CONTRACT_TOKEN": "--token",
    "CONTRACT_SECOND_TOKEN": "--second-token",
    "CONTRACT_ADMIN_TOKEN": "--admin-token",
    "CONTRACT_SEED": "--seed",
    "CONTRACT_SPEC": "the contract to judge against (default: the packaged openapi.yaml)",
    "TOGETHER_BASE_URL": "--base-url when neither the flag nor CONTRACT_BASE_URL is given",
    "TOGETHER_API_KEY": "--token when a base URL is given and neither the flag nor CONTRACT_TOKEN is set",
}
