#!/bin/sh
# theme-branch-merge.sh <branch>  (BSI v3, over `nika-brain branch merge`)
# Runs from any folder: the brain is the parent of this script's folder unless NIKA_BRAIN_DIR is set.
# NIKA_BRAIN overrides the command (say "python3 -m nika_brain").
: "${NIKA_BRAIN_DIR:=$(cd "$(dirname "$0")/.." && pwd)}"
export NIKA_BRAIN_DIR

exec ${NIKA_BRAIN:-nika-brain} branch merge "$@"
