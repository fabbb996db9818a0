"""The policy gate: which tool calls run, which wait for the owner, which are refused.

``tools.py`` declares tools and agents as data, ``decision.py`` decides a call with an ordered
list of small rules, ``canonical.py`` fixes the hash an approval is bound to. Nothing here
imports an adapter; the call path that uses them is ``bot/actions/actions.py``.
"""
