"""The controller's policy: what a run may do, and how risky each step is.

- :mod:`.policy_file`: the operator's policy file (:class:`~.policy_file.Policy`) and the
  domain allowlist applied to the real URL;
- :mod:`.levels`: the risk levels both run kinds share, their order and combination;
- :mod:`.risk`: GUI actions' levels, from the action and what the sandbox reports under it;
- :mod:`.exec_risk` (with :mod:`.exec_rules` and the lexer :mod:`.shell_parse`): the levels
  of a code agent's ``exec`` commands;
- :mod:`.injection`: suspected prompt injection in what the sandbox shows, read by
  :mod:`.text_norm` (normalization), :mod:`.encoded_runs` (base64 and hex decoded),
  :mod:`.injection_cues` (the twelve languages' phrases of ``injection_lexicon.toml``) and
  :mod:`.injection_score` (which combinations of cues pause);
- :mod:`.loops`: the same action on the same screen, again and again;
- :mod:`.run_limits`: the step, time and retry limits of both run kinds.

Each is imported from its module; the package re-exports nothing.
"""

__all__: list[str] = []
