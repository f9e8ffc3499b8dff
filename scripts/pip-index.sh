# Sourced by the scripts that make Python venvs: sets `index` to pip's index arguments. Where pip
# is configured with package mirrors (extra-index-url), they alone are used: pip would otherwise
# try its default index first and wait on retries where there is no internet. Elsewhere `index`
# is empty and pip's defaults apply. `mirrored` says which.
mirrors=$(python3 -m pip config get global.extra-index-url 2>/dev/null || true)
index=()
mirrored=false
if [ -n "$mirrors" ]; then
  set -- $mirrors
  index=(--index-url "$1")
  shift
  for extra in "$@"; do index+=(--extra-index-url "$extra"); done
  mirrored=true
fi
