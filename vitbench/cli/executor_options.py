"""A sweep's executor options as typed: `-o KEY=VALUE` items beside the flags that set an executor option
(--start-method, --keep-logs)."""

from __future__ import annotations


def executor_options(flags: dict, items: list[str]) -> dict:
    """The executor options of `flags` (option -> the value its flag gave) and of the `-o KEY=VALUE` `items`; a
    ConfigError where a flag and an item set one option to different values (-o won in silence: `--no-keep-logs
    -o keep_logs=true` kept the logs, session 31)."""
    from vitbench.errors import ConfigError, clip

    typed = _parse_executor_options(items)
    clash = [k for k in flags if k in typed and typed[k] != flags[k]]
    if clash:
        def said(v) -> str:
            return str(v).lower() if isinstance(v, bool) else clip(str(v), 60)

        raise ConfigError("; ".join(f"--{'no-' * (flags[k] is False)}{k.replace('_', '-')}"
                                    f"{'' if isinstance(flags[k], bool) else ' ' + said(flags[k])} and -o "
                                    f"{k}={said(typed[k])} disagree" for k in clash) + ": give one")
    return {**flags, **typed}


def _parse_executor_options(items: list[str]) -> dict:
    """`-o KEY=VALUE` items -> {key: value}; values are YAML scalars (1 -> int, true -> bool, [a, b] -> list),
    read by the study files' bounded loader."""
    import yaml

    from vitbench.errors import ConfigError, clip, shorten
    from vitbench.study.reader import load_bounded

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--executor-option {shorten(item)}: expected KEY=VALUE, e.g. -o partition=gpu")
        try:
            out[key.strip()] = load_bounded(value)[0] if value.strip() else None
        except yaml.YAMLError as e:
            raise ConfigError(f"--executor-option {shorten(item)}: value is not valid YAML: "
                              f"{clip(str(getattr(e, 'problem', None) or e), 200)}") from None
    return out
