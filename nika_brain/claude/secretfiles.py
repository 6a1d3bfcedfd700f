"""The one list of files whose content must not reach an agent: credentials, keys, tokens.

Used by three layers that must agree: the PreToolUse hook (`is_secret` on every path a tool call or
a Bash command names), Claude Code's `Read(...)` deny rules, and the OS sandbox's
`filesystem.denyRead` (both from `globs()`). Matching is case-insensitive (`.ENV` is `.env` on a
case-insensitive file system, and a secret by intent everywhere). Example files (`.env.example`,
`secrets.sample.json`) are not secrets.

Standard library only: the hook imports this on every Bash and read call.
"""
from __future__ import annotations

import fnmatch
import re

# Exact file names (lower case).
NAMES = frozenset({
    ".env", ".envrc", ".netrc", "_netrc", ".pgpass", ".git-credentials", ".npmrc", ".pypirc",
    ".dockercfg", ".htpasswd", "credentials", "credentials.json", "credentials.yml",
    "credentials.yaml", "credentials.toml", "credentials.db", "access_tokens.db",
    "application_default_credentials.json", "service-account.json", "service_account.json",
    "secrets.json", "secrets.yml", "secrets.yaml", "secrets.toml", "secret.json", "secret.yml",
    "secret.yaml", "terraform.tfvars", "terraform.tfstate", "id_rsa", "id_dsa", "id_ecdsa",
    "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk", "hosts.yml", "environ", "master.key",
    "vault-token", ".vault-token", "kubeconfig",
})
# File name patterns (fnmatch, lower case).
PATTERNS = ("*.pem", "*.key", "*.p12", "*.pfx", "*.keystore", "*.jks", "*.tfvars", "*.tfstate",
            "*.ovpn", ".env.*", "*.env", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
            "*-service-account*.json", "*service_account*.json", "*credentials*.json",
            "secrets.*", "*.secrets", "*.secret")
# A file under one of these folders is a secret whatever its name (lower case).
DIRS = frozenset({"secrets", ".secrets", ".ssh", ".aws", ".gnupg", ".kube", ".docker", "gcloud",
                  ".azure", ".password-store", "nika-brain-operator"})
# `hosts.yml` is a secret only under gh's config folder; `environ` only under /proc.
_ONLY_UNDER = {"hosts.yml": ("gh",), "environ": ("self", "proc")}
_NOT_SECRET = (".example", ".sample", ".template", ".dist", ".md")
_PROC_ENV = re.compile(r"^/proc/(?:self|thread-self|\d+)/(?:task/\d+/)?environ$")


def is_secret(path: str) -> bool:
    """True when `path` (absolute or relative) names a secret file or a file in a secret folder."""
    norm = path.replace("\\", "/")
    if _PROC_ENV.match(norm):
        return True
    parts = [p.lower() for p in norm.split("/") if p and p != "."]
    if not parts:
        return False
    name = parts[-1]
    if any(p in DIRS for p in parts):
        return True
    if name.endswith(_NOT_SECRET):
        return False
    if name in NAMES:
        where = _ONLY_UNDER.get(name)
        return not where or any(p in where for p in parts[:-1])
    return any(fnmatch.fnmatchcase(name, pat) for pat in PATTERNS)


def globs() -> list[str]:
    """The list as gitignore-style globs, for Claude Code deny rules and the sandbox's denyRead.

    Claude Code's globs are case-sensitive: the common spellings in upper case are added."""
    out = [f"**/{n}" for n in sorted(NAMES - {"hosts.yml", "environ"})]
    out += ["**/.config/gh/hosts.yml"]
    out += [f"**/{p}" for p in PATTERNS]
    out += [f"**/{d}/**" for d in sorted(DIRS)]
    out += ["**/.ENV", "**/.ENV.*", "**/*.PEM", "**/*.KEY"]
    return out


def mentions_secret(word: str) -> bool:
    """A shell word that may expand to a secret: the name itself, or a glob matching one
    (`cat .en?`, `cat .e*`, `"$(<.env)"`)."""
    word = word.strip("\"'")
    if word.startswith("$(<"):
        word = word[3:].rstrip(")")
    if is_secret(word):
        return True
    if not any(c in word for c in "*?["):
        return False
    base = word.replace("\\", "/").rsplit("/", 1)[-1].lower()
    if not base or base[0] in "*?[":
        return False  # `*.yml` is judged as a glob over a folder by the recursive check, not as a name
    candidates = list(NAMES) + [p.replace("*", "x") for p in PATTERNS]
    return any(fnmatch.fnmatchcase(c, base) for c in candidates)
