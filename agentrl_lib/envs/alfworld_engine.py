"""ALFWorld engine patches: caches around textworld's TextWorld-PDDL engine that keep its rules and text but skip
repeated work (AlfWorldEnv, envs/alfworld.py, uses them).

The stock PddlEnv re-parses its text grammar on every step (each admissible command is re-derived from its template,
~85% of step time). Cached here: the parsed GameLogic of a (domain, grammar) pair (`game_logic`), and, inside the
`engine_caches()` block only, textgen's TatSu parses of grammar expansions and conjunctive queries (pure functions of
their text), shallow context copies where derivation never mutates, and fast-downward's PDDL→SAS translation per
problem (a second reset of the same game skips it). Patches are scoped to the block, so a stock env in the same
process keeps its own behaviour. Importing this module imports neither textworld nor fast_downward.

No notebook chapter yet: book/environments.md, section "ALFWorld offline", shows the commands.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
from typing import Any


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


@functools.lru_cache(maxsize=32)
def game_logic(domain: str, grammar: str):
    """Parsed GameLogic (domain + TWL2 grammar) — parsing it with TatSu takes ~0.1-0.3 s; games that differ only in
    their goal text get separate entries (the grammar text differs)."""
    from textworld.envs.pddl import logic as pddl_logic

    return pddl_logic.GameLogic(domain=domain, grammar=grammar)


_SAS_CACHE: dict[tuple[str, bool], Any] = {}  # (problem digest, optimize) -> pddl2sas result, 16 games


def _cached_pddl2sas(original):
    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize=False):
        key = (_digest(domain + "\0" + problem), bool(optimize))
        if key not in _SAS_CACHE:
            if len(_SAS_CACHE) >= 16:
                _SAS_CACHE.pop(next(iter(_SAS_CACHE)))
            _SAS_CACHE[key] = original(domain, problem, verbose=verbose, optimize=optimize)
        return _SAS_CACHE[key]

    return pddl2sas


@contextlib.contextmanager
def engine_caches():
    """Within this block textworld's PDDL text generator memoizes its TatSu parses (grammar expansions and
    conjunctive queries are pure functions of their text) and fast-downward's translation is memoized per problem.
    Scoped, so a stock env in the same process keeps its own speed."""
    import fast_downward
    from textworld.envs.pddl import textgen

    saved = (textgen._parse_and_convert, textgen.Rule, fast_downward.pddl2sas, textgen.copy_context,
             textgen.Symbol.copy)
    textgen._parse_and_convert = _parse_symbols
    textgen.Rule = _CachedRule
    fast_downward.pddl2sas = _cached_pddl2sas(saved[2])
    textgen.copy_context = _copy_context
    textgen.Symbol.copy = _symbol_copy
    try:
        yield
    finally:
        (textgen._parse_and_convert, textgen.Rule, fast_downward.pddl2sas, textgen.copy_context,
         textgen.Symbol.copy) = saved


def _copy_context(context):
    """textgen.copy_context without deep copies: derivation only adds keys to `variables`/`mapping` (so each
    context gets its own dicts) and never mutates the entity infos and variables they hold."""
    return {"state": context["state"], "facts": context["facts"], "variables": dict(context["variables"]),
            "mapping": dict(context["mapping"]), "entity_infos": context["entity_infos"]}


def _symbol_copy(self, context):
    """textgen.Symbol.copy that deep-copies the symbol tree but not the game state, facts and entities that the
    contexts inside it point to (the stock copy deep-copies the whole PddlState each time)."""
    memo: dict[int, Any] = {}
    for ctx in (self.context, context):
        for key in ("state", "facts", "entity_infos"):
            if key in ctx:
                memo[id(ctx[key])] = ctx[key]
        for info in ctx.get("entity_infos", {}).values():
            memo[id(info)] = info
        for k, v in ctx.get("mapping", {}).items():
            memo[id(k)], memo[id(v)] = k, v
    new = copy.deepcopy(self, memo)
    new.context = _copy_context(context)
    return new


@functools.lru_cache(maxsize=4096)
def _parse_symbols_cached(text: str, rule_name: str):
    from textworld.envs.pddl import textgen

    return textgen._Converter().walk(textgen._PARSER.parse(text, rule_name=rule_name))


def _parse_symbols(text, rule_name="symbols", **_):
    return copy.deepcopy(_parse_symbols_cached(text, rule_name))  # symbols get their context set: copy


def _make_cached_rule():
    import textworld.logic

    class CachedRule(textworld.logic.Rule):
        @classmethod
        @functools.lru_cache(maxsize=1024)
        def parse_conjunctive_query(cls, expr: str):
            return textworld.logic.Rule.parse_conjunctive_query(expr)

    return CachedRule


class _LazyRule:
    """Resolved on first use so importing this module does not import textworld."""

    _cls = None

    def __getattr__(self, name):
        if _LazyRule._cls is None:
            _LazyRule._cls = _make_cached_rule()
        return getattr(_LazyRule._cls, name)


_CachedRule = _LazyRule()
