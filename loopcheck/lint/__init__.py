"""The static analyzer: parse files with libcst, build the loop model, run the rules.

Never imports torch.
"""
