"""llm: the LLM proposer, its agents and the providers that talk to the user's LLM."""
