"""``preagg completion bash``: a shell completion script generated from the CLI's own parser.

Generated, not written by hand, so it never lists a command or option the parser does
not have. Bash (and zsh through ``bashcompinit``): ``eval "$(preagg completion bash)"``.
"""

from __future__ import annotations

import argparse


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name (none when it has none)."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _words(p: argparse.ArgumentParser) -> list[str]:
    """What may follow a (sub)command: its subcommands, options and choices."""
    out = list(_subparsers(p))
    for action in p._actions:
        out += [o for o in action.option_strings if o.startswith("--")]
        positional = not action.option_strings and not isinstance(action, argparse._SubParsersAction)
        if positional and action.choices:
            out += [str(c) for c in action.choices]
    return sorted(set(out))


def bash_script(parser: argparse.ArgumentParser) -> str:
    """The ``complete -F`` function: words by the first one or two words typed."""
    cases: list[str] = []
    for name, sub in sorted(_subparsers(parser).items()):
        for second, subsub in sorted(_subparsers(sub).items()):
            cases.append(f'    "{name} {second}") words="{" ".join(_words(subsub))}" ;;')
        cases.append(f'    "{name} "*) words="{" ".join(_words(sub))}" ;;')
    return "\n".join(
        [
            '# preagg bash completion: eval "$(preagg completion bash)"',
            "_preagg() {",
            '  local cur="${COMP_WORDS[COMP_CWORD]}" words=""',
            '  if [ "$COMP_CWORD" -eq 1 ]; then',
            f'    words="{" ".join(_words(parser))}"',
            "  else",
            '    case "${COMP_WORDS[1]} ${COMP_WORDS[2]}" in',
            *cases,
            "    esac",
            "  fi",
            '  COMPREPLY=($(compgen -W "$words" -- "$cur"))',
            "}",
            "complete -o default -F _preagg preagg",
            "",
        ]
    )
