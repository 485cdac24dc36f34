// Package agreement is the host agreement of fleet_ssh_deployment: the
// protocol between a deployer (this provider, one per apply; several may
// race for a host) and a host it switches, over SSH links that can stall,
// drop, reset or heal at any moment. It holds both halves: the scripts the
// host runs (host.go) and the deployer's (lease.go, ask.go). It imports no
// framework code and runs nothing itself: a Host runs its scripts.
//
// # Parties and state
//
// A run is one node's deploy: a random id names it, on the host and in
// every message. On the host, under /run (gone at a reboot):
//
//   - LockFile: flock'd exclusively by the lease keeper of the current run
//     (the lock session's script, below). HolderFile names its holder.
//   - LeaseFile: "<run> <keeper pid>", the run whose lease is current;
//     written once the keeper holds the lock and the guard, removed when
//     the lease ends. WordsFile counts that lease's words.
//   - GuardFile: flock'd shared by every actor while it acts (the command
//     that activates, the activation, the watchdog, the boot entry's
//     command); exclusively by a keeper before its lease begins, so that a
//     lease begins only once every actor of earlier ones has ended.
//   - StateDir/<run>/: the run's actions' fates ("act.1.fate",
//     "boot.1.fate": links to "started" or "cancelled", made once), the
//     activation's output, each attempt's exit status ("activated.N") and
//     pids ("unit.N.pid", "unit.N.stc"), the activation's exit status
//     ("activated": written by the attempt that did not meet a held switch
//     lock, exit 11, after which the deployer tries again), the watchdog's
//     wake FIFO, "heard" (its mtime: when the watchdog last heard a "w"
//     word), the decision ("decision": a link to "confirm" or
//     "rollback", made once; "lapsed" when the watchdog made it, its
//     clock run out, rather than a deployer's word), the watchdog's state and the exit status of
//     its switch back ("rolledback"), the boot entry's ("booted.N").
//   - SucceededFile (under RecordDir, /nix/var/fleet-deploy, which a
//     reboot keeps): the last system a run finished with a passing
//     verdict (and, for goal switch and boot, its boot entry).
//
// # Messages
//
// deployer -> host, each an ssh command (or a line of one):
//
//  1. take (the lock session, over the node's master): wait up to
//     lock_timeout for LockFile, then for GuardFile; write the lease;
//     print "locked" and what the host runs; then read words until
//     standard input closes. While waiting it prints "wait <holder>"
//     twice a second; out of time, "busy <holder>".
//  2. words, a line each, on the lock session or on a spare session (a
//     new login whose script only reads words), at least once a second:
//     "h <run>" on the lock session keeps run's lease (the lease is the
//     lock session's: it ends with that session's connection, as the
//     deployer's ssh gives up on it); "w <run>" does too, and keeps run's
//     watchdog waiting on either session; the host answers "ack". "c <run>" and "r <run>" decide the
//     run (confirm, roll back) unless it is decided; the host answers
//     "decided <run> <decision that stands>". "b <run>" ends run's lease.
//  3. act (a command): under the guard, fenced (below), claim act.N;
//     point the system profile at the new system; start the watchdog
//     (a transient unit, so that it outlives the session); run the
//     activation (another, waited for): it records its exit status.
//  4. boot (a command): under the guard, fenced, claim boot.N;
//     switch-to-configuration boot; record its exit status and, on
//     success, SucceededFile.
//  5. ask (a command over a new login): what the host runs and boots,
//     whose lease is current, and what became of a run's actions; with
//     cancel, each named action that has not started is cancelled (its
//     fate made "cancelled"), so a request whose answer was lost can
//     never start later: after an ask the deployer knows for good.
//     View.Settled reads the answer into what became of the activation
//     (never started, confirmed, switched back, left alone, a failed
//     switch back, or not settled yet): the one place a record's outcome
//     comes from.
//
// # Fencing
//
// What changes what a host runs or boots happens only under the lease it
// belongs to, and each action says how it knows:
//
//   - act, boot and profile (commands) pass fleet_fence: holding the guard
//     shared, a keeper must hold the lock, LeaseFile must name the
//     action's run, and the action's fate (act.N, boot.N, profile) must be
//     claimed ("started") by this request.
//   - The activation (unit.N, started by act) checks again as it starts,
//     holding the guard shared: LeaseFile names its run, a keeper holds
//     the lock, its own fate is claimed, and the run is not decided.
//   - The watchdog is started by the first act, inside the fence that
//     command passed; it takes the guard shared and starts only if act.1
//     is "started".
//   - The watchdog's switch back checks no lease: it has held the guard
//     since it started, so no later lease has begun; it switches back only
//     a host that still runs the system its activation activated (or the
//     one before, when an attempt began and did not meet the switch lock),
//     and only once every attempt of the activation that started has ended
//     (it stops one still running first): its switch back is the run's
//     last.
//   - "b <run>" signals the keeper LeaseFile names only while a keeper
//     holds the lock (a killed keeper's file may name a pid reused since).
//
// A lease cannot begin while an actor holds the guard, and a new keeper
// removes LeaseFile as soon as it holds the lock, so whatever of an ended
// lease arrives late is refused ("fleet: fenced: ..."), and what passed
// the fence finishes before the next lease begins. An action's record
// (activated.N, booted.N, SucceededFile) that cannot be written fails the
// action: no later read would know what it did.
//
// # Timeouts, and who counts them
//
//   - lock_timeout (the host): how long take waits for the lock and guard.
//   - remote_exec_timeout (the host's keeper): a lease that heard no word
//     for that long ends, within a quarter more (the keeper looks four
//     times in that time, and ends it at the look that finds no new word
//     since four looks back); ssh's keepalive (the deployer) gives up on a
//     silent connection after about as long.
//   - confirm_timeout (the host's watchdog): once the activation has ended
//     ("activated": an attempt that met a held switch lock has not ended
//     it, a retry follows; or the run's lease has ended with no attempt
//     running: no attempt starts any more; a lease has ended once
//     LeaseFile names another run or none, or no keeper holds the lock,
//     as after a killed keeper, whose LeaseFile stays) (or activation_timeout has
//     passed), a watchdog that heard no "w" word
//     for confirm_timeout decides rollback; Timing.HostGivesUp is when,
//     seen from the deployer, with the watchdog's tick.
//   - Timing.SpareAfter (the deployer): a session that has not answered a
//     word for that long gets a spare: a new login that carries the words
//     too, long before ssh's keepalive would end the silent one.
//   - Timing.HostGivesUp (the deployer): a host that answered no word for
//     that long after its activation ended has decided, unless a
//     confirmation reached it; the deployer stops naming the run (so the
//     watchdog's clock runs) and asks. During the activation the silence
//     decides nothing (the watchdog waits for the activation's end): the
//     deployer goes on naming the run and asks, over new logins, cancelling
//     nothing, for up to AskFor. A host that answers with nothing decided
//     is back: the deployer asks it for the attempt's exit status (the
//     attempt's session is ended) and goes on. A host whose watchdog has
//     decided is settled as above; one that does not answer is left to its
//     watchdog: the deployer stops naming the run, and the outcome is not
//     known.
//
// # What each side knows after a fault
//
// The host settles on its own: left alone, a watchdog decides, keeps the
// new system only if a confirmation reached it, and otherwise switches
// back within confirm_timeout of the last word it heard (once the
// activation has ended). The deployer records only what the host told it:
// an answer, or, when the answer was lost, an ask over a new login (which
// cancels what had not started). When no login succeeds within the bound
// (Timing.AskFor), the record says the outcome is not known, and the next
// refresh reads the host and settles it.
//
//   - A stalled link (packets held): words go quiet, a spare path starts
//     after SpareAfter; if it works, the watchdog keeps waiting and the
//     decision and the boot entry go over new logins. A lock session
//     silent for remote_exec_timeout ends on both sides (the host's keeper,
//     the deployer's keepalive): a racing deployer may take the lease, and
//     whatever the stalled one sends later is fenced; a deployer whose
//     activation was confirmed takes the lock again, as a new run, to make
//     its boot entry while the host still runs its system. If every path is
//     stalled, the watchdog decides after confirm_timeout (once the
//     activation has ended), and the deployer asks until AskFor, then
//     records what it learnt or that it does not know; a path that comes
//     back while the activation runs (within AskFor) finds the run going
//     on.
//   - A reset link: the lock session ends, and with it the lease; the
//     deployer fails the node before it changes anything, or, after the
//     activation, carries on over new logins (its watchdog keeps listening
//     to a spare) and its boot entry is fenced: recorded as not made.
//   - A dead deployer: its sessions end (or go silent); the lease ends, the
//     watchdog decides rollback, and the next take waits for it.
//   - A second deployer: waits for the lock, then for the guard (the
//     first's actors, its watchdog), up to lock_timeout; once it holds the
//     lease the first is fenced.
package agreement
