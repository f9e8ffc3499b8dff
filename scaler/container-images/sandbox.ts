/**
 * The service sandbox's two scripts (docs/security.md, "Service sandbox and replica network"): the
 * shell that prepares a replica's namespaces as root, and the Perl that is its last host process,
 * which drops every privilege and only then execs the image's command with the tenant's
 * environment. Perl because perl-base is part of every Debian system (the platform's image too)
 * and can chroot, change ids and make the two system calls (prctl, unshare) a shell cannot: no
 * compiled helper to ship, and no tool from the image is needed.
 */

/** The id a replica runs as where the image names no user, or root, and root is not allowed. */
export const UNPRIVILEGED_ID = 65534;

/**
 * Runs as root in the replica's fresh mount, network, IPC and UTS namespaces, started by run.ts
 * with a fixed environment (PATH of the system folders only): nothing a tenant set reaches it.
 * Arguments: scratch, rootfs, working dir, uid, gid, the replica's runtime dir (root's, 0711),
 * the ports to forward in, the host ports it may reach (both comma-separated), then the command. It mounts the root filesystem, brings
 * up the namespace's loopback (its only interface), starts one socat per port that carries the
 * gateway's connections from a Unix socket in the runtime dir to the port inside (as nobody, its
 * stderr dropped: a refused connection while the service starts is no log line), and execs into a
 * new PID namespace (proc mounted there), where the Perl below drops every privilege and starts
 * the service.
 */
export function prepareScript(
  tools: Record<"mount" | "mkdir" | "rm" | "ln" | "ip" | "socat" | "unshare" | "perl", string>,
): string {
  const [mount, mkdir, rm, ln, ip, socat, unshare, perl] = [
    tools.mount,
    tools.mkdir,
    tools.rm,
    tools.ln,
    tools.ip,
    tools.socat,
    tools.unshare,
    tools.perl,
  ].map(q);
  return [
    "set -e",
    'M="$1"; L="$2"; W="$3"; U="$4"; G="$5"; S="$6"; P="$7"; O="$8"; shift 8',
    `${mount} -t tmpfs -o mode=0755 tmpfs "$M"`,
    `${mkdir} "$M/upper" "$M/work" "$M/root"`,
    `${mount} -t overlay overlay -o "lowerdir=$L,upperdir=$M/upper,workdir=$M/work" "$M/root"`,
    'R="$M/root"',
    // A symlink or file where /proc or /dev should be is replaced (in the overlay): a mount never follows the image's links.
    `for d in proc dev; do if [ -L "$R/$d" ] || [ ! -d "$R/$d" ]; then ${rm} -rf "$R/$d"; ${mkdir} "$R/$d"; fi; done`,
    `${mount} -t tmpfs -o nosuid,mode=0755 tmpfs "$R/dev"`,
    `for n in null zero full random urandom tty; do if [ -e "/dev/$n" ]; then : > "$R/dev/$n"; ${mount} --bind "/dev/$n" "$R/dev/$n"; fi; done`,
    `${mkdir} "$R/dev/shm" "$R/dev/pts"`,
    `${mount} -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$R/dev/shm"`,
    `${ln} -s /proc/self/fd "$R/dev/fd"; ${ln} -s /proc/self/fd/0 "$R/dev/stdin"; ${ln} -s /proc/self/fd/1 "$R/dev/stdout"; ${ln} -s /proc/self/fd/2 "$R/dev/stderr"`,
    // The sandbox's own /etc/hosts (localhost only): never the host's, whose names say nothing inside.
    `if [ -d "$R/etc" ] && [ ! -L "$R/etc" ]; then ${rm} -rf "$R/etc/hosts"; printf '127.0.0.1\\tlocalhost\\n::1\\tlocalhost\\n' > "$R/etc/hosts"; fi`,
    `${ip} link set lo up`,
    "IFS=,; for p in $P; do",
    `  ${socat} "UNIX-LISTEN:$S/$p.sock,fork,su=${UNPRIVILEGED_ID}" "TCP4:127.0.0.1:$p" 2>/dev/null &`,
    "done",
    // The host ports the operator lets services reach: the scaler's end connects to the host's port.
    "for p in $O; do",
    `  ${socat} "TCP4-LISTEN:$p,bind=127.0.0.1,fork,reuseaddr,su=${UNPRIVILEGED_ID}" "UNIX-CONNECT:$S/out-$p.sock" 2>/dev/null &`,
    "done; unset IFS",
    `exec ${unshare} --pid --fork --mount-proc="$R/proc" -- ${perl} -e ${q(DROP_AND_EXEC)} "$S/env" "$R" "$W" "$U" "$G" "$@"`,
  ].join("\n");
}

/**
 * The last host process, root in the new PID namespace with a fixed environment. In this order:
 * reads the tenant's environment from the runtime dir's `env` (NUL-separated NAME=value, written
 * 0600 by run.ts) and removes the file; empties the capability bounding set; sets the groups to
 * the gid alone, then gid and uid; sets no_new_privs; enters a new user namespace mapping that uid
 * and gid to themselves (one each: every other owner, root among them, is unmapped there), which is
 * what lets an unprivileged process chroot; chroots into the root filesystem and changes to the
 * working directory; empties the bounding set of the new namespace too. Then it forks: the child
 * execs the command (looked up on the tenant's PATH inside the root, as docker does) with exactly
 * the tenant's environment, and holds no capability in any namespace; this process stays as the
 * namespace's init (PID 1 ignores signals it has no handler for, so a service that installs none
 * would never stop on SIGTERM): it passes SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 on,
 * reaps orphans, and exits as the command did (128 + the signal for one killed). It is the
 * service's own kind of process by then (its uid, chrooted, no capability). A failure before the
 * fork exits 126 naming the step, a command that cannot start 127. System call numbers: x86_64, aarch64.
 */
const DROP_AND_EXEC = String.raw`
use strict; use warnings; no warnings "exec"; use POSIX ();
my ($envfile, $root, $wd, $uid, $gid, @argv) = @ARGV;
sub fail { print STDERR "platform sandbox: $_[0]: $!\n"; exit 126 }
my %nr = (x86_64 => [272, 157], aarch64 => [97, 167]);
my $arch = (POSIX::uname())[4];
my ($UNSHARE, $PRCTL) = @{ $nr{$arch} // fail("unsupported architecture $arch") };
open(my $fh, "<", $envfile) or fail("reading the environment");
my $raw = do { local $/; <$fh> }; close $fh; unlink $envfile;
my %env = map { split /=/, $_, 2 } grep { length } split /\0/, $raw;
open(my $cl, "<", "/proc/sys/kernel/cap_last_cap") or fail("reading cap_last_cap");
chomp(my $last = <$cl>); close $cl;
# Opened as root: the folders above the root may be closed to the service's uid, and fchdir checks the root alone.
opendir(my $rootdh, $root) or fail("opening the root");
sub drop_bounding { for my $c (0 .. $last) { syscall($PRCTL, 24, $c, 0, 0, 0) == 0 or fail("dropping capability $c") } }
drop_bounding();
$! = 0; $) = "$gid $gid"; fail("setting the groups") if $!;
POSIX::setgid($gid) or fail("setting gid $gid");
POSIX::setuid($uid) or fail("setting uid $uid");
fail("dropping privileges") unless $< == $uid && $> == $uid && $( + 0 == $gid && $) + 0 == $gid;
syscall($PRCTL, 38, 1, 0, 0, 0) == 0 or fail("setting no_new_privs");
syscall($PRCTL, 4, 1, 0, 0, 0) == 0 or fail("setting dumpable");
syscall($UNSHARE, 0x10000000) == 0 or fail("creating a user namespace");
sub put { open(my $f, ">", $_[0]) or fail("opening $_[0]"); print $f $_[1] or fail("writing $_[0]"); close $f or fail("writing $_[0]") }
put("/proc/self/uid_map", "$uid $uid 1\n");
put("/proc/self/setgroups", "deny\n");
put("/proc/self/gid_map", "$gid $gid 1\n");
chdir($rootdh) or fail("entering the root");
chroot(".") or fail("chroot");
closedir($rootdh);
chdir($wd) or fail("changing to the working directory $wd");
drop_bounding();
my $pid = 0;
for my $s (qw(TERM INT HUP QUIT USR1 USR2)) { $SIG{$s} = sub { kill $s, $pid if $pid } }
$pid = fork() // fail("fork");
if ($pid == 0) { %ENV = %env; exec { $argv[0] } @argv; print STDERR "platform sandbox: starting $argv[0]: $!\n"; exit 127 }
$0 = "platform-init";
%env = ();
while (1) {
  my $w = waitpid(-1, 0);
  if ($w == $pid) { my $st = $?; exit($st & 127 ? 128 + ($st & 127) : $st >> 8) }
  exit 1 if $w == -1 && !$!{EINTR};
}
`;

export const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
