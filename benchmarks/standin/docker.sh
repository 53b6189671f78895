#!/bin/sh
# A `docker` stand-in for the scale fleet (benchmarks/scale_fleet.py). NOT Docker: it keeps
# one host's containers as files in $STANDIN_HOST/state and answers the commands MiniDock
# runs (ps, inspect, run, stop, rm, image inspect, logs, pull, network) in the real CLI's output
# formats (tests/data/docker holds real recordings). A container runs nothing: `run`
# records it running (a health check passes at once), `stop` records it exited (143).
# Only POSIX sh builtins on the probe's path (ps, inspect): one `date` per run and stop,
# one `rm` per rm. The inspect document is the template below, made by scale_fleet.py
# from tests/data/docker/healthy.json.
S="$STANDIN_HOST/state"
sq="'"
bs='\'
dq='"'

quote() { # $1 -> $Q, single-quoted for sh
    r=$1 Q="'"
    while :; do
        case $r in
            *"$sq"*) Q="$Q${r%%"$sq"*}'\\''"; r=${r#*"$sq"} ;;
            *) Q="$Q$r'"; return ;;
        esac
    done
}

json() { # $1 -> $J, a JSON string literal
    r=$1 J=
    while :; do
        case $r in
            *["$bs$dq"]*)
                head=${r%%["$bs$dq"]*}; r=${r#"$head"}
                J="$J$head$bs${r%"${r#?}"}"; r=${r#?} ;;
            *) J="\"$J$r\""; return ;;
        esac
    done
}

now() { stamp=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ); }

find_() { # $1: id, id prefix (12+) or name -> $id, or return 1
    id=
    if [ -f "$S/$1.vars" ]; then id=$1; return 0; fi
    if [ -f "$S/$1.name" ]; then read -r id <"$S/$1.name"; return 0; fi
    if [ ${#1} -ge 12 ]; then
        for f in "$S/$1"*.vars; do
            [ -f "$f" ] || continue
            id=${f##*/}; id=${id%.vars}; return 0
        done
    fi
    return 1
}

save() { # the loaded container's variables -> $S/$id.vars
    out=
    for v in id name status cluster has_cluster ports_col host_ports created started \
             finished exit_code pid image image_j image_id path_j args cmd labels bindings exposed \
             net_ports nano memory health healthcheck; do
        eval "val=\${$v}"
        quote "$val"
        out="$out$v=$Q
"
    done
    printf '%s' "$out" >"$S/$id.vars"
}

state_json() { # the loaded container's State object
    running=false
    [ "$status" = running ] && running=true
    st="{
            \"Status\": \"$status\",
            \"Running\": $running,
            \"Paused\": false,
            \"Restarting\": false,
            \"OOMKilled\": false,
            \"Dead\": false,
            \"Pid\": $pid,
            \"ExitCode\": $exit_code,
            \"Error\": \"\",
            \"StartedAt\": \"$started\",
            \"FinishedAt\": \"$finished\""
    if [ -n "$health" ]; then
        st="$st,
            \"Health\": {
                \"Status\": \"$health\",
                \"FailingStreak\": 0,
                \"Log\": [
                    {
                        \"Start\": \"$started\",
                        \"End\": \"$started\",
                        \"ExitCode\": 0,
                        \"Output\": \"ok\\n\"
                    }
                ]
            }"
    fi
    state="$st
        }"
}

#@DOC@

ps_() {
    # a host with a file `slow` answers ps that many seconds late (bench_watch.py --slow)
    if [ -f "$STANDIN_HOST/slow" ]; then read -r late <"$STANDIN_HOST/slow"; sleep "$late"; fi
    all= want= format=
    while [ $# -gt 0 ]; do
        case $1 in
            -a|--all) all=1 ;;
            -q) format='{{.ID}}' ;;
            -aq|-qa) all=1; format='{{.ID}}' ;;
            --filter) shift; want=$1 ;;
            --format) shift; format=$1 ;;
        esac
        shift
    done
    for f in "$S"/*.vars; do
        [ -f "$f" ] || continue
        . "$f"
        [ -n "$all" ] || [ "$status" = running ] || continue
        case $want in
            "") ;;
            label=minidock.cluster) [ -n "$has_cluster" ] || continue ;;
            label=minidock.cluster=*) [ -n "$has_cluster" ] && [ "$cluster" = "${want#*=*=}" ] || continue ;;
            *) echo "docker stand-in: unsupported filter $want" >&2; exit 125 ;;
        esac
        case $format in
            '{{.ID}}') printf '%s\n' "$id" ;;
            '{{.ID}} {{.State}} {{.Status}}') # the probe's listing (commands.facts.ps_argv)
                case $status in
                    running) word="Up 1 hour${health:+ ($health)}" ;;
                    exited) word="Exited ($exit_code) 1 hour ago" ;;
                    *) word=$status ;;
                esac
                printf '%s %s %s\n' "$id" "$status" "$word" ;;
            *'{{.Ports}}'*) printf '%s\t%s\n' "$cluster" "$ports_col" ;;
            *) echo "docker stand-in: unsupported format $format" >&2; exit 125 ;;
        esac
    done
}

inspect_() {
    [ "$1" = --type ] && shift 2
    rc=0 sep= body=
    for ref in "$@"; do
        if find_ "$ref"; then
            . "$S/$id.vars"
            state_json
            doc
            body="$body$sep$DOC"
            sep=",
"
        else
            printf 'Error: No such container: %s\n' "$ref" >&2
            rc=1
        fi
    done
    if [ -z "$body" ]; then printf '[]\n'; else printf '[\n%s\n]\n' "$body"; fi
    return $rc
}

run_() {
    busy=" "  # host ports of the running containers, read before this one's options
    for f in "$S"/*.vars; do
        [ -f "$f" ] || continue
        . "$f"
        [ "$status" = running ] && busy="$busy${host_ports# }"
    done
    name= labels= bindings= exposed= net_ports= ports_col= host_ports=" " nano=0 memory=0
    health= healthcheck=null has_cluster= cluster= hcmd= hint=0 htime=0 hretries=0 hstart=0
    while [ $# -gt 0 ]; do
        case $1 in
            -d) ;;
            --name) name=$2; shift ;;
            --label)
                k=${2%%=*}; v=${2#*=}
                [ "$k" = minidock.cluster ] && { has_cluster=1; cluster=$v; }
                json "$k"; jk=$J; json "$v"
                labels="$labels${labels:+,}
                $jk: $J"; shift ;;
            --env-file) while read -r _line; do :; done; shift ;;
            -p)
                hp=${2%%:*}; cp=${2#*:}; proto=tcp
                case $cp in */*) proto=${cp#*/}; cp=${cp%/*} ;; esac
                bindings="$bindings${bindings:+,}
                \"$cp/$proto\": [{\"HostIp\": \"\", \"HostPort\": \"$hp\"}]"
                exposed="$exposed${exposed:+,}
                \"$cp/$proto\": {}"
                net_ports="$net_ports${net_ports:+,}
                \"$cp/$proto\": [{\"HostIp\": \"0.0.0.0\", \"HostPort\": \"$hp\"}, {\"HostIp\": \"::\", \"HostPort\": \"$hp\"}]"
                ports_col="$ports_col${ports_col:+, }0.0.0.0:$hp->$cp/$proto, :::$hp->$cp/$proto"
                host_ports="$host_ports$hp/$proto "
                shift ;;
            --cpus)
                whole=${2%%.*}; frac=
                case $2 in *.*) frac=${2#*.} ;; esac
                frac="${frac}000000000"
                while [ ${#frac} -gt 9 ]; do frac=${frac%?}; done
                nano=$(( ${whole:-0} * 1000000000 + 1$frac - 1000000000 )); shift ;;
            --memory) memory=$2; shift ;;
            --health-cmd) hcmd=$2; health=healthy; shift ;;
            --health-interval|--health-timeout|--health-retries|--health-start-period|--restart) shift ;;
            --network|--network-alias|--stop-timeout) shift ;;
            -*) echo "docker stand-in: unknown run flag $1" >&2; exit 125 ;;
            *) break ;;
        esac
        shift
    done
    [ $# -gt 0 ] || { echo '"docker run" requires at least 1 argument.' >&2; exit 125; }
    image=$1; shift
    json "$image"; image_j=$J
    image_id=
    while read -r known known_id; do
        [ "$known" = "$image" ] && image_id=$known_id
    done <"$STANDIN_HOST/images"
    if [ -z "$image_id" ]; then
        printf "Unable to find image '%s' locally\n" "$image" >&2
        printf "docker: Error response from daemon: pull access denied for %s, repository does not exist or may require 'docker login'.\n" "${image%:*}" >&2
        exit 125
    fi
    if [ -n "$name" ] && [ -f "$S/$name.name" ]; then
        read -r other <"$S/$name.name"
        printf 'docker: Error response from daemon: Conflict. The container name "/%s" is already in use by container "%s". You have to remove (or rename) that container to be able to reuse that name.\n' "$name" "$other" >&2
        exit 125
    fi
    taken=
    for p in $host_ports; do
        case $busy in *" $p "*) taken=$p ;; esac
    done
    read -r n <"$S/.counter" || n=0
    n=$((n + 1))
    printf '%s\n' "$n" >"$S/.counter"
    c="0000000000000000$n"
    while [ ${#c} -gt 16 ]; do c=${c#?}; done
    read -r prefix <"$STANDIN_HOST/prefix"
    id="$prefix$c"
    [ -n "$name" ] || name=${id%"${id#????????????}"}
    now
    created=$stamp started=$stamp finished=0001-01-01T00:00:00Z exit_code=0 pid=$((1000 + n))
    status=running
    json "${1:-}"; path_j=$J
    args= cmd=
    for a in "$@"; do json "$a"; cmd="$cmd${cmd:+, }$J"; done
    if [ $# -gt 1 ]; then shift; for a in "$@"; do json "$a"; args="$args${args:+, }$J"; done; fi
    [ -n "$cmd" ] && cmd="[$cmd]" || cmd=null
    args="[$args]"
    if [ -n "$hcmd" ]; then json "$hcmd"; healthcheck="{\"Test\": [\"CMD-SHELL\", $J]}"; fi
    if [ -n "$taken" ]; then  # as Docker does: the container is created, its start fails
        status=created started=0001-01-01T00:00:00Z pid=0 health=
    fi
    save
    printf '%s\n' "$id" >"$S/$name.name"
    [ -n "$taken" ] || event start
    if [ -n "$taken" ]; then
        printf 'docker: Error response from daemon: driver failed programming external connectivity on endpoint %s: Bind for 0.0.0.0:%s failed: port is already allocated.\n' "$name" "${taken%/*}" >&2
        exit 125
    fi
    printf '%s\n' "$id"
}

event() { # $1: the action, of the loaded container -> the host's event log (docker events)
    printf '%s %s %s\n' "$1" "$id" "$(date +%s%N)" >>"$STANDIN_HOST/events"
}

stop_() {
    for ref in "$@"; do ref=$ref; done  # the last argument (after -t N)
    find_ "$ref" || { printf 'Error response from daemon: No such container: %s\n' "$ref" >&2; exit 1; }
    . "$S/$id.vars"
    if [ "$status" = running ]; then
        now
        status=exited exit_code=${kill_code:-143} finished=$stamp pid=0
        save
        event die
    fi
    printf '%s\n' "$ref"
}

events_() { # the host's event log from now on, as `docker events --format` prints it
    : >>"$STANDIN_HOST/events"
    exec tail -n 0 -f "$STANDIN_HOST/events"
}

rm_() {
    force= rc=0 gone=
    for ref in "$@"; do
        case $ref in
            -f) force=1; continue ;;
        esac
        if ! find_ "$ref"; then
            printf 'Error: No such container: %s\n' "$ref" >&2; rc=1; continue
        fi
        . "$S/$id.vars"
        if [ "$status" = running ] && [ -z "$force" ]; then
            printf 'Error response from daemon: You cannot remove a running container %s. Stop the container before attempting removal or force remove\n' "$id" >&2
            rc=1; continue
        fi
        gone="$gone $S/$id.vars $S/$name.name"
        event destroy
        printf '%s\n' "$ref"
    done
    [ -z "$gone" ] || rm -f $gone
    return $rc
}

image_() {
    [ "$1" = inspect ] || { echo "docker stand-in: unknown image command $1" >&2; exit 125; }
    for image in "$@"; do image=$image; done
    while read -r known known_id; do
        if [ "$known" = "$image" ]; then printf '%s\n' "$known_id"; return 0; fi
    done <"$STANDIN_HOST/images"
    printf 'Error: No such image: %s\n' "$image" >&2
    return 1
}

pull_() {
    for image in "$@"; do image=$image; done
    image_ inspect "$image" >/dev/null 2>&1 && { printf '%s: Pulling from library\n' "$image"; return 0; }
    printf 'Error response from daemon: pull access denied for %s, repository does not exist or may require '"'"'docker login'"'"'\n' "${image%:*}" >&2
    return 1
}

network_() { # inspect (the minidock.cluster label), create, connect: networks as files
    sub=$1; shift
    for last in "$@"; do last=$last; done
    case $sub in
        inspect)
            if [ -f "$S/$last.network" ]; then cat "$S/$last.network"; return 0; fi
            printf 'Error response from daemon: network %s not found\n' "$last" >&2; return 1 ;;
        create)
            label=
            while [ $# -gt 1 ]; do
                case $1 in --label) label=${2#minidock.cluster=}; shift ;; esac
                shift
            done
            printf '%s\n' "$label" >"$S/$last.network"
            printf '%064x\n' 1 ;;
        connect) return 0 ;;
        *) echo "docker stand-in: unknown network command $sub" >&2; exit 125 ;;
    esac
}

verb=$1
[ $# -gt 0 ] && shift
# with a file `count` in the host's directory, each command is counted (bench_watch.py)
[ -f "$STANDIN_HOST/count" ] && printf '%s\n' "$verb" >>"$STANDIN_HOST/calls"
case $verb in
    kill) kill_code=137 stop_ "$@" ;;  # as `docker kill`: exits 137 (the benchmarks' fault)
    events) events_ "$@" ;;
    ps) ps_ "$@" ;;
    inspect) inspect_ "$@" ;;
    run) run_ "$@" ;;
    stop) stop_ "$@" ;;
    rm) rm_ "$@" ;;
    image) image_ "$@" ;;
    logs) exit 0 ;;
    # the probe reads the engine (docker version --format '{{json .}}'): Debian 12's Docker
    version) printf '%s\n' '{"Client":{"Version":"20.10.24+dfsg1"},"Server":{"Components":[{"Name":"Engine","Version":"20.10.24+dfsg1"}],"Version":"20.10.24+dfsg1"}}' ;;
    pull) pull_ "$@" ;;
    network) network_ "$@" ;;
    *) printf 'docker stand-in: unknown command: %s\n' "$verb" >&2; exit 125 ;;
esac
