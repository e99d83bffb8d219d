"""The shell commands in README.md, docs/kubernetes.md and helm/serve-app/README.md are real: every helm and kubectl
flag is in the help of the Helm 4.1 / kubectl 1.35 binaries, every `serve-app` line parses with
the CLI's own parser, every `--set` key of this chart exists (values.yaml, or the application
configuration for `config.*`), the install and upgrade lines render with `helm template`,
third-party charts are pinned and come from a repository the README adds, manifests fed to
`kubectl apply -f -` validate strictly, the README's names match the rendered chart, the ingest
body is the API's request model, and the test token is accepted by the API's authenticator
under config/gpu.yaml. Nothing here reaches a cluster, a registry or docker."""

from __future__ import annotations

import functools
import itertools
import re
import shlex
import string
import subprocess
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel

from deployments.cli import build_parser
from serve_app.config import AppConfig, load_config
from tests.helm import rendering
from tests.helm.test_chart import CHART, HELM, K8S_VERSION, ROOT, validate_rayservice

KUBECTL = ROOT / ".cache" / "bin" / "kubectl"
DEPLOY_DOCS = [ROOT / "docs" / "kubernetes.md"]  # the whole production sequence
README = ROOT / "README.md"  # its short install is checked like any command
DOCS = [README, *DEPLOY_DOCS, CHART / "README.md"]
SHELLS = {"bash", "sh", "shell"}
OPERATORS = {";", "&&", "||", "|", "&", "(", ")", "$(", "`"}
REDIRECTS = {"<", ">", ">>", "<<", "<<-", "2>", "&>"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
HEREDOC = re.compile(r"<<-?\s*'?\"?([A-Za-z_]+)'?\"?")
FLAG_HELP = re.compile(r"^\s+(?:(-[A-Za-z]), )?(--[a-z0-9-]+)", re.M)
SET_FLAGS = {"--set", "--set-string", "--set-json", "--set-file", "--set-literal"}


@dataclass
class Command:
    doc: str
    argv: list[str]
    heredoc: str | None = None
    line: str = ""

    @property
    def program(self) -> str:
        return Path(self.argv[0]).name


@dataclass
class Doc:
    path: Path
    commands: list[Command] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def shell_blocks(text: str) -> list[str]:
    fences = re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
    return [m.group(2) for m in fences if m.group(1) in SHELLS]


def logical_lines(block: str) -> list[tuple[str, str | None]]:
    """(command line, heredoc body): continuations joined, quotes spanning lines kept whole."""
    lines = block.splitlines()
    out: list[tuple[str, str | None]] = []
    buffer = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        try:
            shlex.split(buffer, comments=True)
        except ValueError:  # a quoted string goes on to the next line
            buffer += "\n"
            continue
        body = None
        found = HEREDOC.search(buffer)
        if found:
            tag, body_lines = found.group(1), []
            while i < len(lines) and lines[i].strip() != tag:
                body_lines.append(lines[i])
                i += 1
            i += 1
            body = "\n".join(body_lines) + "\n"
        if buffer.strip():
            out.append((buffer, body))
        buffer = ""
    return out


def simple_commands(line: str) -> list[list[str]]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, current = [], []
    tokens = list(lexer)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in OPERATORS or (
            token.endswith("$") and i + 1 < len(tokens) and tokens[i + 1] == "("
        ):
            commands.append(current)
            current = []
        elif token in REDIRECTS:
            i += 1  # its target
        else:
            current.append(token)
        i += 1
    commands.append(current)
    cleaned = []
    for command in commands:
        # Command substitutions inside words ("$(kubectl get secret ...)") are commands too.
        for token in command:
            for inner in substitutions(token):
                cleaned += simple_commands(inner)
        while command and ASSIGNMENT.match(command[0]):
            command = command[1:]
        if command:
            cleaned.append(command)
    return cleaned


def substitutions(token: str) -> list[str]:
    """The text of each top-level $(...) in a word."""
    found, start = [], token.find("$(")
    while start != -1:
        depth, i = 0, start + 1
        while i < len(token):
            depth += {"(": 1, ")": -1}.get(token[i], 0)
            if depth == 0:
                break
            i += 1
        found.append(token[start + 2 : i])
        start = token.find("$(", i)
    return found


@functools.cache
def parse_doc(path: Path) -> Doc:
    doc = Doc(path)
    for block in shell_blocks(path.read_text()):
        for line, body in logical_lines(block):
            for argv in simple_commands(line):
                if argv[0] == "export":
                    for pair in argv[1:]:
                        name, _, value = pair.partition("=")
                        if "$" not in value:  # literal values only (step 1's REGISTRY, TAG)
                            doc.env[name] = value
                    continue
                doc.commands.append(Command(path.name, argv, body, line))
    return doc


def all_commands(program: str) -> list[Command]:
    return [c for d in DOCS for c in parse_doc(d).commands if c.program == program]


def command_id(command: Command) -> str:
    return f"{command.doc}: {' '.join(command.argv)[:70]}"


# -- binaries' help -------------------------------------------------------------------------
@functools.cache
def help_of(binary: str, path: tuple[str, ...]) -> tuple[str, str]:
    done = subprocess.run(
        [binary, *path, "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, done.stdout + done.stderr


def usage_names(text: str, program: str) -> str:
    match = re.search(rf"Usage:\n\s+({program} [^\n]*)", text)
    return match.group(1) if match else ""


def subcommand(binary: str, program: str, words: list[str]) -> tuple[str, ...]:
    """The longest prefix of ``words`` that the binary's help names as a command."""
    found: tuple[str, ...] = ()
    for n in range(1, min(len(words), 3) + 1):
        path = tuple(words[:n])
        code, text = help_of(binary, path)
        usage = usage_names(text, program)
        if code == 0 and (usage + " ").startswith(f"{program} {' '.join(path)} "):
            found = path
    assert found, f"{program} {' '.join(words)}: no such command"
    return found


def flags_in(text: str) -> set[str]:
    return {f for pair in FLAG_HELP.findall(text) for f in pair if f}


def used_flags(argv: list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in argv if a.startswith("-") and a != "-"}


KUBECTL_VALUE_FLAGS = {"-n", "--namespace", "--context", "--kubeconfig", "-f", "--filename"}


def kubectl_words(argv: list[str]) -> list[str]:
    words, skip = [], False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg.startswith("-") and arg != "-":
            skip = arg in KUBECTL_VALUE_FLAGS
        else:
            words.append(arg)
    return words


@pytest.mark.parametrize("command", all_commands("helm"), ids=command_id)
def test_helm_flags_exist_in_helm_4(command):
    words = [a for a in command.argv[1:] if not a.startswith("-")]
    path = subcommand(str(HELM), "helm", words)
    _, text = help_of(str(HELM), path)
    assert used_flags(command.argv) <= flags_in(text), (path, used_flags(command.argv))


@pytest.mark.parametrize("command", all_commands("kubectl"), ids=command_id)
def test_kubectl_flags_exist_in_kubectl_1_35(command):
    assert KUBECTL.is_file(), "run scripts/setup.sh (installs kubectl into .cache/bin)"
    path = subcommand(str(KUBECTL), "kubectl", kubectl_words(command.argv))
    _, text = help_of(str(KUBECTL), path)
    options = subprocess.run(
        [str(KUBECTL), "options"], capture_output=True, text=True, timeout=60, check=True
    ).stdout  # the flags every command takes (-n, --context, ...)
    assert used_flags(command.argv) <= flags_in(text) | flags_in(options), path


def test_the_binaries_are_helm_4_and_kubectl_1_35():
    helm = subprocess.run([str(HELM), "version", "--short"], capture_output=True, text=True)
    assert helm.stdout.startswith("v4.")
    kubectl = subprocess.run([str(KUBECTL), "version", "--client"], capture_output=True, text=True)
    assert "v1.35." in kubectl.stdout


@pytest.mark.parametrize("command", all_commands("serve-app"), ids=command_id)
def test_serve_app_lines_parse_with_the_cli_parser(command):
    args = build_parser().parse_args(command.argv[1:])  # SystemExit on anything unknown
    assert args.command


# -- this chart's install and upgrade lines ------------------------------------------------
def chart_commands() -> list[tuple[Doc, Command]]:
    found = []
    for path in DOCS:
        doc = parse_doc(path)
        for command in doc.commands:
            argv = command.argv
            if command.program == "helm" and argv[1] in ("install", "upgrade"):
                positional = [a for a in chart_args(argv)]
                if "helm/serve-app" in positional:
                    found.append((doc, command))
    return found


def chart_args(argv: list[str]) -> list[str]:
    """Positional arguments of helm install/upgrade (flags with values skipped)."""
    valued = {"-n", "--namespace", "-f", "--values", "--timeout", "--version", *SET_FLAGS}
    out, skip = [], False
    for arg in argv[2:]:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg in valued
        else:
            out.append(arg)
    return out


def set_pairs(argv: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for flag, value in itertools.pairwise(argv):
        if flag in SET_FLAGS:
            key, _, raw = value.partition("=")
            pairs.append((key, raw))
    return pairs


def key_path(key: str) -> list[str | int]:
    path: list[str | int] = []
    for part in key.split("."):
        name, *indexes = re.split(r"\[(\d+)\]", part)
        if name:
            path.append(name)
        path += [int(i) for i in indexes if i != ""]
    return path


def config_has(path: list[str | int]) -> bool:
    model: type[BaseModel] | None = AppConfig
    for i, part in enumerate(path):
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
        candidates = [annotation, *typing.get_args(annotation)]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if nested:
            model = nested[0]
        elif any(typing.get_origin(c) is dict or c is dict for c in candidates):
            return True  # a mapping: any key below it
        else:
            return i == len(path) - 1
    return True


def values_has(path: list[str | int]) -> bool:
    node = yaml.safe_load((CHART / "values.yaml").read_text())
    for part in path:
        if isinstance(node, dict) and node == {}:
            return True  # an open mapping (nodeSelector, annotations)
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
        else:  # list entries are free-form
            return isinstance(node, list) and isinstance(part, int)
    return True


@pytest.mark.parametrize(
    "doc,command", chart_commands(), ids=[command_id(c) for _, c in chart_commands()]
)
def test_set_keys_exist(doc, command):
    pairs = set_pairs(command.argv)
    assert pairs or "-f" in command.argv
    for key, _ in pairs:
        path = key_path(key)
        exists = config_has(path[1:]) if path[0] == "config" else values_has(path)
        assert exists, f"{key}: not a key of values.yaml (or of the app configuration)"
    for flag, value in itertools.pairwise(command.argv):
        if flag in ("-f", "--values"):
            assert (ROOT / value).is_file(), value


# A registry the chart accepts in place of step 1's, which names an example domain on purpose
# (copied as written, the install stops and says how to build and name the image).
REGISTRY = "registry.internal/search"


def template_args(
    doc: Doc, command: Command, previous: list[str], registry: str | None = REGISTRY
) -> list[str]:
    """helm template arguments for an install/upgrade line, with the README's exported
    variables (REGISTRY replaced by ``registry`` unless None); an upgrade that reuses values
    starts from the install line before it."""
    keep = {"-n", "--namespace", "-f", "--values", *SET_FLAGS}
    args = (
        list(previous)
        if {"--reuse-values", "--reset-then-reuse-values"} & set(command.argv)
        else []
    )
    argv = command.argv
    for i, arg in enumerate(argv):
        if arg in keep:
            env = {**parse_doc(ROOT / "README.md").env, **doc.env}  # step 1's exports
            if registry is not None:
                env["REGISTRY"] = registry
            value = string.Template(argv[i + 1]).safe_substitute(env)
            args += [arg, value]
    return args


def test_install_and_upgrade_lines_render(tmp_path):
    install: list[str] = []
    rendered = 0
    for doc, command in chart_commands():
        args = template_args(doc, command, install)
        if "--install" in command.argv or command.argv[1] == "install":
            install = args
        release = chart_args(command.argv)[0]
        done = subprocess.run(
            [str(HELM), "template", release, "helm/serve-app", *args],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, (command.line, done.stderr)
        (service,) = [d for d in rendering.load_all(done.stdout) if d["kind"] == "RayService"]
        validate_rayservice(service)
        image = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"][
            "containers"
        ][0]["image"]
        assert image == f"{REGISTRY}/serve-app:0.1.0", image
        if any(k.startswith("gcsFaultTolerance.") for k, _ in set_pairs(command.argv)):
            options = service["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]
            assert options["redisPassword"]["valueFrom"]["secretKeyRef"]["name"]
        rendered += 1
    assert rendered >= 3  # README step 5, its GCS fault tolerance upgrade, the chart README


def test_the_placeholder_registry_as_written_is_refused_with_the_build_command():
    """Step 1's REGISTRY is an example domain: run as written, every install line fails before
    anything reaches the cluster, naming the Dockerfile, the build command and the value."""
    installs = [
        (d, c) for d, c in chart_commands() if "--install" in c.argv or c.argv[1] == "install"
    ]
    assert len(installs) >= 4  # README, the chart's README, docs: vanilla and production
    for doc, command in installs:
        env = {**parse_doc(ROOT / "README.md").env, **doc.env}
        assert "example." in env["REGISTRY"]  # registry.example.com/search
        args = template_args(doc, command, [], registry=None)
        done = subprocess.run(
            [str(HELM), "template", chart_args(command.argv)[0], "helm/serve-app", *args],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode != 0, command.line
        for hint in ("reserved for examples", "Dockerfile", "docker build", "image.repository="):
            assert hint in done.stderr, done.stderr


# -- third-party charts ---------------------------------------------------------------------
def third_party_installs() -> list[tuple[Doc, Command]]:
    found = []
    for path in DOCS:
        doc = parse_doc(path)
        for command in doc.commands:
            if command.program == "helm" and command.argv[1] in ("install", "upgrade"):
                chart = chart_args(command.argv)[1]
                if not (ROOT / chart).exists():
                    found.append((doc, command))
    return found


def test_third_party_charts_are_pinned_and_their_repositories_added():
    installs = third_party_installs()
    assert {chart_args(c.argv)[1] for _, c in installs} == {
        "opensearch/opensearch",
        "qdrant/qdrant",
        "kuberay/kuberay-operator",
    }
    for doc, command in installs:
        assert "--version" in command.argv, command.line
        repo = chart_args(command.argv)[1].split("/")[0]
        added = [
            c.argv[4]
            for c in doc.commands[: doc.commands.index(command)]
            if c.argv[:3] == ["helm", "repo", "add"] and c.argv[3] == repo
        ]
        assert added and added[0].startswith("https://"), (repo, command.line)
    kuberay = [c for _, c in installs if "kuberay/kuberay-operator" in c.argv]
    assert kuberay
    for command in kuberay:
        assert command.argv[command.argv.index("--version") + 1] == "1.7.0"


# -- what the commands name and send ---------------------------------------------------------
def production_install(doc: Doc) -> Command:
    """The doc's install line with the production values."""
    (command,) = [
        c for d, c in chart_commands()
        if d is doc and "helm/serve-app/ci/gpu-production.yaml" in c.argv
    ]  # fmt: skip
    return command


@pytest.mark.parametrize("path", DEPLOY_DOCS, ids=lambda p: p.name)
def test_applied_manifests_validate_strictly(path):
    applied = [c for c in parse_doc(path).commands if c.program == "kubectl" and "apply" in c.argv]
    assert applied
    for command in applied:
        assert command.heredoc, command.line
        for manifest in yaml.safe_load_all(command.heredoc):
            kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


@pytest.mark.parametrize("path", DEPLOY_DOCS, ids=lambda p: p.name)
def test_names_match_the_rendered_chart(path):
    """The Service, Secrets, claim and RayService the doc's commands name are the ones the
    chart renders from step 5's values (the production install)."""
    doc = parse_doc(path)
    args = template_args(doc, production_install(doc), [])
    done = subprocess.run(
        [str(HELM), "template", "serve-app", "helm/serve-app", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    lines = [" ".join(c.argv) for c in doc.commands]
    text = "\n".join(lines)
    assert f"port-forward svc/{service['spec']['serveService']['metadata']['name']} " in text
    for command in doc.commands:
        if command.program == "serve-app" and "cluster" in command.argv:
            args = build_parser().parse_args(command.argv[1:])
            assert (args.name, args.namespace) == (service["metadata"]["name"], "search")
    head = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    secrets = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in head["containers"][0]["env"]
        if "valueFrom" in e
    }
    (fetch,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("fetch")]
    fetch_spec = fetch["spec"]["template"]["spec"]
    secrets |= {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in fetch_spec["containers"][0]["env"]
        if "valueFrom" in e
    }
    created = {c.argv[c.argv.index("generic") + 1] for c in doc.commands if "generic" in c.argv}
    assert secrets - {"redis-password"} <= created, secrets - created
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in fetch_spec["volumes"]
        if "persistentVolumeClaim" in v
    }
    applied = [c for c in doc.commands if c.program == "kubectl" and "apply" in c.argv]
    names = {m["metadata"]["name"] for c in applied for m in yaml.safe_load_all(c.heredoc)}
    assert claims <= names


@pytest.mark.parametrize("path", DEPLOY_DOCS, ids=lambda p: p.name)
def test_the_ingest_body_is_the_api_request(path):
    from serve_app.api.models import IngestRequest

    posts = [
        c for c in parse_doc(path).commands if c.program == "curl" and "/v1/documents" in c.line
    ]
    assert posts
    for command in posts:
        body = command.argv[command.argv.index("-d") + 1]
        assert IngestRequest.model_validate_json(body).documents


@pytest.mark.parametrize("path", DEPLOY_DOCS, ids=lambda p: p.name)
def test_the_test_token_passes_the_api_authenticator(monkeypatch, path):
    """The README's token minting, run as written with a secret in JWT_SECRET, gives a token
    the API accepts under config/gpu.yaml (audience, issuer, exp, tenant, scopes)."""
    from serve_app.api.auth import Authenticator

    (mint,) = [
        c for c in parse_doc(path).commands
        if c.program == "python" and c.argv[1:2] == ["-c"] and "jwt.encode" in c.argv[2]
    ]  # fmt: skip
    secret = "a-32-byte-secret-for-the-readme-test"
    done = subprocess.run(
        [sys.executable, "-c", mint.argv[2]],
        env={"JWT_SECRET": secret, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    token = done.stdout.strip()
    config = load_config(ROOT / "config" / "gpu.yaml", environ={})
    monkeypatch.setenv(config.api.auth.jwt.secret_env, secret)
    principal = Authenticator(config.api.auth).authenticate(f"Bearer {token}", None)
    assert principal.tenant_id == "acme" and {"read", "write"} <= principal.scopes
    assert config.api.auth.jwt.audience and config.api.auth.jwt.issuer  # both checked


@pytest.mark.parametrize("path", DEPLOY_DOCS, ids=lambda p: p.name)
def test_the_parser_sees_every_step(path):
    """Guards the extraction itself: each doc's sequence yields the commands checked above."""
    programs = [c.program for c in parse_doc(path).commands]
    for program in ("docker", "kubectl", "helm", "serve-app", "python", "curl"):
        assert program in programs, program
    assert len(all_commands("helm")) >= 10 and len(all_commands("kubectl")) >= 10


def test_every_value_the_prerequisites_name_exists():
    """docs/kubernetes.md's prerequisites say which value to change when a cluster differs:
    every chart value they name (a key under one of values.yaml's top-level keys; `*` any
    worker group, or anything below) is a key of values.yaml."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    section = text.split("## Prerequisites", 1)[1].split("\n## ", 1)[0]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    named = {
        key
        for code in re.findall(r"`([A-Za-z][\w.*{},]*)(?:=[^`]*)?`", section)
        if code.split(".")[0] in values
        for key in expand(code)
    }
    assert len(named) >= 15, named
    for key in sorted(named):
        if key.startswith("workerGroups.*."):
            concrete = [key.replace("*", group) for group in values["workerGroups"]]
        else:
            concrete = [key.removesuffix(".*")]
        for one in concrete:
            assert values_has(key_path(one)), one


def expand(code: str) -> list[str]:
    """`a.{b,c}.d` -> a.b.d, a.c.d."""
    match = re.search(r"\{([^}]*)\}", code)
    if not match:
        return [code]
    return [
        key
        for option in match.group(1).split(",")
        for key in expand(code[: match.start()] + option + code[match.end() :])
    ]
