"""Config models read from TOML with RASE_... environment overrides.

Precedence: explicit keyword arguments > environment > TOML file > defaults.
Nested fields use a double underscore: RASE_AGENT_CALIBRATION__BETA=0.6.
A bad value is one ConfigError naming the field, the bad value and the file.
"""

from __future__ import annotations

import contextvars
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from rase_common.errors import ConfigError

_TOML_PATH: contextvars.ContextVar[Path | None] = contextvars.ContextVar("rase_toml_path", default=None)

S = TypeVar("S", bound="TomlSettings")


def read_secret(path: Path, field: str) -> str:
    """A password kept in a file (a Docker secret): its first line."""
    try:
        return path.read_text().splitlines()[0] if path.stat().st_size else ""
    except OSError as err:
        raise ConfigError(f"{field}: cannot read {path}: {err.strerror}") from err


def format_validation_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "(config)"
        msg = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        detail = f"{field}: {msg}"
        if e["type"] != "missing" and not isinstance(got, dict):
            detail += f" (got {got!r})"
        lines.append(detail)
    return f"bad config in {source}: " + "; ".join(lines)


class TomlSettings(BaseSettings):
    model_config = SettingsConfigDict(env_nested_delimiter="__", extra="forbid", frozen=True)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = _TOML_PATH.get()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @classmethod
    def load(cls: type[S], path: str | Path | None = None, **overrides: Any) -> S:
        """Read `path` (TOML), apply RASE_... environment and keyword overrides."""
        if path is not None:
            path = Path(path)
            if not path.is_file():
                raise ConfigError(f"config file not found: {path}")
        token = _TOML_PATH.set(path)
        try:
            return cls(**overrides)
        except ValidationError as err:
            raise ConfigError(format_validation_error(err, str(path) if path else "environment")) from None
        except ValueError as err:  # TOML syntax errors surface as ValueError subclasses
            raise ConfigError(f"bad config in {path}: {err}") from None
        finally:
            _TOML_PATH.reset(token)


def with_role_tables(base: type[S], service: str, module: str) -> type[S]:
    """`base` with one optional field per role of the service that has a
    config table (rase_common.role.Role.config_key and Config), so that a
    mode's table ([prio3]) reads, overrides (RASE_..._PRIO3__...) and fails
    like every other table, while the service's config names no mode."""
    from pydantic import create_model

    from rase_common.role import role_classes

    fields: dict[str, Any] = {}
    for cls in role_classes(service):
        if cls.config_key is not None and cls.Config is not None:
            fields[cls.config_key] = (cls.Config | None, None)
    model = create_model(base.__name__.lstrip("_"), __base__=base, __module__=module, **fields)
    model.__doc__ = base.__doc__
    return model
