"""What every configuration section shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

ENV_PREFIX = "SERVE_APP__"
CONFIG_ENV = "SERVE_APP_CONFIG"


class Section(BaseModel):
    """A configuration section: unknown fields are refused (a typo fails at start with the
    field's path) and non-finite numbers too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
