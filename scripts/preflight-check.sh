#!/bin/sh
# preflight-check.sh <scope> <zone> | preflight-check.sh reset <scope>  (BSI v3, over `nika-brain preflight`)
# Runs from any folder: the brain is the parent of this script's folder unless NIKA_BRAIN_DIR is set.
# NIKA_BRAIN overrides the command (say "python3 -m nika_brain").
: "${NIKA_BRAIN_DIR:=$(cd "$(dirname "$0")/.." && pwd)}"
export NIKA_BRAIN_DIR

if [ "$1" = "reset" ]; then
    shift
    exec ${NIKA_BRAIN:-nika-brain} preflight reset "$@"
fi
exec ${NIKA_BRAIN:-nika-brain} preflight check "$@"
