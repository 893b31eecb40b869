#!/bin/sh
# What chrislusf/seaweedfs's entrypoint does with `server`: data in /data, as many volumes as the
# disk holds, 1 GB each (`weed server`'s own defaults, 8 volumes of 30 GB, fail PutObject here with
# InternalError). Unlike the public image, volumes are not preallocated: each would take 1 GB of
# disk at once. Any other command runs `weed` as given.
set -eu
if [ "${1:-}" = server ]; then
    shift
    exec /usr/bin/weed server -dir=/data -volume.max=0 -master.volumeSizeLimitMB=1024 "$@"
fi
exec /usr/bin/weed "$@"
