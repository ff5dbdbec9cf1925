"""agentrl_lib: multi-turn agentic RL for language models in text environments (the agentrl workbook's library)."""
__version__ = "0.1.0"
