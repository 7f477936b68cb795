"""The ``om`` command line. Thin: every verb parses its arguments and calls a use case or a server.

An error the operator can fix (settings, profile, database, broker, an unknown thread) is reported by the
root command, in one place (``OperatorErrors``): one line naming the cause and the fix, exit status 2.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from om_core.settings import ServerSettings


class OperatorErrors(TyperGroup):
    """The root command. An error an operator can fix is one line on stderr, exit status 2; anything else is
    a bug and keeps its traceback. ``--debug`` (or ``OM_DEBUG=1``) shows the traceback of either."""

    # Any: the context is click's, or (typer >= 0.29) the copy of click typer carries
    def invoke(self, ctx: Any) -> Any:
        # what a migration run from the command line does is reported by the verb; Alembic's INFO is noise
        logging.getLogger("alembic").setLevel(logging.WARNING)
        for line in unknown_settings(os.environ):
            typer.echo(f"warning: {line}", err=True)
        try:
            return super().invoke(ctx)
        except Exception as error:
            message = operator_error(error)
            if message is None or ctx.params.get("debug"):
                raise
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(2) from None


def operator_error(error: BaseException) -> str | None:
    """The line telling an operator what is wrong and what to do about it; None when it is not theirs."""
    import redis
    import sqlalchemy as sa

    from om_core.application.ports import ModelConfigurationError, StoreUnavailableError
    from om_core.application.projections import VersionOutOfRangeError
    from om_core.application.streams import RecordNotFoundError
    from om_core.bootstrap import SchemaNotMigratedError, SchemaTooNewError
    from om_core.domain.config import ConfigError, WebhookSecretError
    from om_core.settings import ProfileError, SettingsError
    from om_core.startup import StartupError

    if isinstance(error, SettingsError | ProfileError | ConfigError | WebhookSecretError | StartupError):
        return _one_line(str(error))
    if isinstance(error, ModelConfigurationError):
        return (
            f"{error}; set the key, or set OM_PROFILE to a YAML/JSON profile naming another model "
            "(without a profile, Mastra's default model is used)"
        )
    if isinstance(error, VersionOutOfRangeError):
        return f"{error}: pass --to {error.version} or less"
    if isinstance(error, SchemaNotMigratedError):
        return f"{error}: run `om migrate` on this database first"
    if isinstance(error, SchemaTooNewError):
        return str(error)
    if isinstance(error, RecordNotFoundError):
        tenant, kind, name = [*error.stream_id.split("/", 2), "", ""][:3]
        return (
            f"no {kind} {name!r} for tenant {tenant!r}: check the id, or pass --tenant "
            f"(or the full stream id TENANT/{kind}/{name})"
        )
    if isinstance(error, StoreUnavailableError | sa.exc.OperationalError | sa.exc.InterfaceError):
        return _database_error(_one_line(str(getattr(error, "orig", None) or error)))
    if isinstance(error, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        cause = _one_line(str(error))
        return f"cannot reach the broker ({cause}); check OM_BROKER_URL and that Redis is running"
    return None


# variables the command line itself reads (typer options), and those of docker-compose.yml (read by compose)
COMMAND_LINE_VARIABLES = frozenset({"OM_DEBUG", "OM_TENANT", "OM_PROFILE_FILE", "OM_API_BIND"})


def unknown_settings(environ: Mapping[str, str]) -> list[str]:
    """A line for each ``OM_*`` variable no setting reads (``om_core.startup.unknown_variables``): the
    server's and the workers' settings, the command line's own, and the webhook secrets the profile names."""
    from om_core.settings import ENV_PREFIX, ServerSettings
    from om_core.startup import unknown_variables
    from om_workers.settings import WorkerSettings

    if not any(name.startswith(ENV_PREFIX) for name in environ):
        return []
    known = {ENV_PREFIX + name.upper() for name in ServerSettings.model_fields}
    known |= {"OM_WORKER_" + name.upper() for name in WorkerSettings.model_fields}
    return unknown_variables(environ, known | COMMAND_LINE_VARIABLES | _webhook_secret_variables(environ))


def _webhook_secret_variables(environ: Mapping[str, str]) -> set[str]:
    """The ``secretEnv`` names of the profile's webhooks; none when the profile cannot be read (the verb
    reports that itself)."""
    from om_core.domain.config import ConfigError, parse_memory_config
    from om_core.domain.profiles import split_profile_document
    from om_core.settings import ProfileError, read_profile

    path = environ.get("OM_PROFILE")
    if not path:
        return set()
    try:
        default, named = split_profile_document(read_profile(path))
        layers = [parse_memory_config(layer) for layer in (default, *named.values())]
    except (ProfileError, ConfigError):
        return set()
    return {hook.secret_env for config in layers for hook in config.webhooks if hook.secret_env}


def _database_error(cause: str) -> str:
    missing_table = re.search(r'no such table: (\w+)|relation "(\w+)" does not exist', cause)
    if missing_table:
        table = missing_table[1] or missing_table[2]
        return f"the database has no table {table} ({cause}): run `om migrate` on this database first"
    missing_database = re.search(r'database "([^"]+)" does not exist', cause)
    if missing_database:
        return f"{cause}: create it (createdb {missing_database[1]}) or fix OM_DATABASE_URL"
    return (
        f"cannot reach the database ({cause}); check OM_DATABASE_URL and that the database server is running"
    )


def _one_line(text: str) -> str:
    """A multi-line message (a list of problems, a driver's hint) as one line."""
    head, *rest = [" ".join(line.split()).removeprefix("- ") for line in text.splitlines() if line.strip()]
    return f"{head} {'; '.join(rest)}" if rest else head


app = typer.Typer(
    cls=OperatorErrors, help="Observational Memory as an event-sourced service.", no_args_is_help=True
)
projections_app = typer.Typer(help="Inspect and rebuild projections.", no_args_is_help=True)
app.add_typer(projections_app, name="projections")


@app.callback()
def main(
    debug: Annotated[
        bool, typer.Option("--debug", envvar="OM_DEBUG", help="Show the traceback of an error (OM_DEBUG=1).")
    ] = False,
) -> None:
    """The options of om itself, given before the verb: `om --debug VERB ...`."""


def _settings(**overrides: object) -> ServerSettings:
    from om_core.settings import ServerSettings

    return ServerSettings(**{k: v for k, v in overrides.items() if v is not None})


def _database(database_url: str | None) -> str:
    """The database a verb works on: validated as OM_DATABASE_URL is, its schema at head (SQLite, the
    embedded store, is migrated on the spot)."""
    from om_core.bootstrap import prepare_database

    url = _settings(database_url=database_url).database_url
    prepare_database(url)
    return url


@app.command()
def demo(
    turns: Annotated[int, typer.Option(min=1, help="Conversation turns (user + assistant).")] = 320,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic conversation.")] = 7,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the summary, as JSON.")] = False,
    database: Annotated[
        Path | None, typer.Option(help="SQLite file to write (default: a new one in .om/).")
    ] = None,
    background: Annotated[
        bool, typer.Option(help="Run background work on a worker thread instead of right after each commit.")
    ] = False,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the demo's SQLite file in .om/ (else it is deleted).")
    ] = False,
) -> None:
    """Run a long synthetic conversation through the engine, embedded: SQLite and, unless OM_PROFILE names
    a profile file, the keyless local model with small thresholds."""
    import time

    from om_api.demo.runner import DEMO_PROFILE, run_demo
    from om_core.bootstrap import check_profile_models

    settings = _settings()
    profile = settings.profile_layer if settings.profile is not None else DEMO_PROFILE
    # the file's own models, keys checked as a server checks them; its default profile is the one used
    check_profile_models(profile)
    if database is None and keep:
        database = Path(".om") / f"demo-{int(time.time() * 1000)}.sqlite3"
    where = (
        f"SQLite at {database} (kept)"
        if database
        else "a scratch SQLite file (deleted at the end; --keep keeps it)"
    )
    if settings.profile is None:
        what = f"the keyless local model {DEMO_PROFILE['model']} (OM_PROFILE names a profile to use instead)"
    else:
        what = (
            f"the default profile of OM_PROFILE={settings.profile} (model {profile.get('model', 'default')})"
        )
    typer.echo(f"om demo: {what}, {where}; no services", err=True)
    run_demo(
        turns=turns, seed=seed, as_json=as_json, database=database, background=background, profile=profile
    )


@app.command()
def migrate(
    database_url: Annotated[
        str | None, typer.Option(envvar="OM_DATABASE_URL", help="Database to migrate.")
    ] = None,
) -> None:
    """Upgrade the database schema to the newest revision (Alembic owns the schema)."""
    from om_core.adapters.store.migrations import upgrade_to_head

    url = _settings(database_url=database_url).database_url
    upgrade_to_head(url)
    typer.echo(f"schema at head on {url.split('@')[-1]}")


@projections_app.command("rebuild")
def projections_rebuild(
    verify: Annotated[bool, typer.Option(help="Only compare: fail if a rebuilt projection differs.")] = False,
    database_url: Annotated[str | None, typer.Option(envvar="OM_DATABASE_URL")] = None,
    prefix: Annotated[str, typer.Option(help="Only streams whose id starts with this.")] = "",
) -> None:
    """Rebuild every stream's projection from its events; with --verify, prove the stored one is identical."""
    from om_core.adapters.store import create_event_store
    from om_core.application.projections import rebuild_projections

    store = create_event_store(_database(database_url))
    report = rebuild_projections(store, store, verify_only=verify, prefix=prefix)
    typer.echo(json.dumps(report.as_dict(), indent=2))
    if verify and report.mismatched:
        raise typer.Exit(1)


@projections_app.command("reindex")
def projections_reindex(
    database_url: Annotated[str | None, typer.Option(envvar="OM_DATABASE_URL")] = None,
    prefix: Annotated[str, typer.Option(help="Only streams whose id starts with this.")] = "",
) -> None:
    """Embed every recorded observation's groups again into the vector index (retrieval vector: true),
    with the profile's embedder: after enabling vectors on existing records or changing the embedder."""
    from dataclasses import asdict

    from om_core.application.vector_index import reindex_observations
    from om_core.bootstrap import build_inline

    deps, dispatcher = build_inline(
        database_url=_database(database_url), profile=_settings().profile_document, migrate=False
    )
    try:
        report = reindex_observations(deps, prefix=prefix)
    finally:
        dispatcher.close()
    typer.echo(json.dumps(asdict(report), indent=2))


@app.command()
def replay(
    thread: Annotated[str, typer.Argument(help="Thread id (or a full stream id tenant/thread/ID).")],
    to: Annotated[int | None, typer.Option("--to", min=1, help="Replay the first N events only.")] = None,
    tenant: Annotated[
        str, typer.Option(envvar="OM_TENANT", help="The tenant the thread belongs to.")
    ] = "default",
    database_url: Annotated[str | None, typer.Option(envvar="OM_DATABASE_URL")] = None,
) -> None:
    """Print the context window a fresh fold of the thread's events gives (at version N with --to)."""
    from om_core.application.profiles import config_of
    from om_core.application.projections import replay_context
    from om_core.bootstrap import reading_deps

    # the thread's own profile (a tenant's is read from the store) as it was at the last event replayed
    deps = reading_deps(_database(database_url), _settings().profile_document)
    try:
        stream_id = thread if thread.count("/") >= 2 else f"{tenant}/thread/{thread}"
        window = replay_context(
            deps.store,
            stream_id,
            to_version=to,
            config_for=lambda state: config_of(deps, state, at_position=state.position),
        )
    finally:
        deps.close()
    typer.echo(json.dumps(window, indent=2, ensure_ascii=False))


def _register_entry_points() -> None:
    # the server and worker verbs live with their entry points; they import this module's app lazily
    from om_api.commands import register as register_api_commands
    from om_mcp.commands import register as register_mcp_commands
    from om_workers.commands import register as register_worker_commands

    register_worker_commands(app)
    register_api_commands(app)
    register_mcp_commands(app)


_register_entry_points()


if __name__ == "__main__":
    app()
