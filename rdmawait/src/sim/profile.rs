//! Network profiles: what each step of a simulated run costs in virtual time.
//!
//! With a profile ([`Config::profile`](super::Config::profile)) a simulated run is timed: every
//! simulated thread has its own clock, advanced by the CPU cost of each of its operations, and
//! the thread whose clock is earliest runs next. The soft NIC's steps are no longer taken at
//! random: each pending step of the model (docs/model.md §4) becomes due at a time computed
//! from the profile, and steps are taken in the order they fall due, as a real NIC's would.
//!
//! | step of the model | due (after the step before it) |
//! |---|---|
//! | a post leaves the store buffer for its queue pair | `doorbell` (WQE write and doorbell, until the NIC has the request), then the NIC's outbound rate, then a free lane of a one-at-a-time device ([`Profile::device_put`]), or under [`Profile::device_on_cpu`] (rxe) the post itself takes the device time on the thread's CPU |
//! | a put reads its source (nLR) | `pcie_read` |
//! | the put's data is sent | `nic` |
//! | the remote write lands (nRW commit) | `wire` + `nic`, then the target's inbound rate |
//! | a get's or RMW's remote read (nRR, nAR) | `wire` + `nic`, then the target's inbound rate |
//! | an RMW's atomic write commits and frees the target's remote-atomic lock | `atomic` |
//! | a get's response is back (nLW pending) | `wire` + `read_response` |
//! | an RMW's response is back (nLW pending) | `atomic` + `wire` after its remote read |
//! | a put's acknowledgement is back | `nic` + 2 `wire` after sending |
//! | a local write or a completion notice reaches host memory | `pcie_write` |
//!
//! `wire` is `loopback` when a thread's queue pair targets its own node. Every NIC delay is
//! stretched or shrunk by up to `jitter` (a fraction), drawn from the run's seed, so different
//! seeds interleave differently while each seed stays reproducible. The model's rules still
//! decide which step may go next (a get waits behind an earlier put's remote write, an RMW
//! waits for the target's remote-atomic lock), so a timed run shows only behaviours the model
//! allows: the weak ones that the timing makes happen (a put's late source read, unordered
//! operations towards different nodes) are still there.
//!
//! The model's remote-atomic lock is per node, so remote RMWs on one node are serialised even
//! at different addresses (real NICs serialise per address, or per a hash of it): contended
//! atomics cost the same in the simulation; unrelated ones on one node cost more.

use std::time::Duration;

/// What each simulated step costs. Build one from [`Profile::connectx5`] or [`Profile::rxe`]
/// and change fields with struct update syntax:
///
/// ```
/// use loco_rdmawait::sim::Profile;
/// use std::time::Duration;
///
/// let far = Profile { wire: Duration::from_micros(5), ..Profile::connectx5() };
/// assert!(far.predict_put() > Profile::connectx5().predict_put());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// A name for reports.
    pub name: String,
    /// One-way latency between two nodes' NICs (cable, switch, a small packet's serialisation).
    pub wire: Duration,
    /// One-way latency of a queue pair towards its own node (the NIC loops it back).
    pub loopback: Duration,
    /// Processing of a request by a NIC, at each end.
    pub nic: Duration,
    /// From the CPU's post until the NIC has the request (WQE write, doorbell, WQE fetch).
    pub doorbell: Duration,
    /// The NIC's DMA read of a put's source in host memory.
    pub pcie_read: Duration,
    /// The NIC's DMA write of a get's data, an RMW's old value or a completion into host memory.
    pub pcie_write: Duration,
    /// The requester's handling of a get's response before its data goes to host memory
    /// (hardware on a real NIC; software on rxe, where reads are much slower than atomics).
    pub read_response: Duration,
    /// The time a target NIC holds a remote RMW (read, modify, write over PCIe); RMWs on one
    /// node are serialised for this long each.
    pub atomic: Duration,
    /// Per NIC, the gap between two inbound operations it executes (1 / inbound message rate).
    pub inbound_gap: Duration,
    /// Per NIC, the gap between two requests it starts sending (1 / outbound message rate).
    pub outbound_gap: Duration,
    /// A CPU load or store.
    pub cpu_op: Duration,
    /// A CPU compare-and-swap or `mfence`.
    pub cpu_rmw: Duration,
    /// The CPU side of a post (building the request, ringing the doorbell).
    pub post: Duration,
    /// One poll of a completion queue.
    pub poll: Duration,
    /// A spin loop's pause between two rounds.
    pub pause: Duration,
    /// One spin-loop hint (`std::hint::spin_loop`: x86's `PAUSE`), as a back-off that spins
    /// a number of them between two tries spends it ([`crate::clock::spin_hints`]).
    /// `connectx5`: 40 ns (since Skylake, Intel's `PAUSE` takes about 140 cycles; 34-48 ns
    /// measured on this project's Xeon host); `rxe`: 500 ns (123-128 ns measured in the VM,
    /// where the emulator leaves its translated code at each `PAUSE`, on a day the profile's
    /// fitted scale was 0.2-0.27).
    pub spin_hint: Duration,
    /// Each NIC delay is multiplied by a factor drawn uniformly from `1 ± jitter`: a fraction,
    /// 0 to 1 (a negative value is taken as 0, no jitter; one above 1 as 1). A NaN or infinite
    /// value is refused: a run under it fails as
    /// [`FailureKind::Setup`](super::FailureKind::Setup).
    pub jitter: f64,
    /// One device doing every node's NIC work, [`Profile::device_lanes`] requests at a time:
    /// a request leaves its store buffer only once a lane is free and the same thread's
    /// previous request has held the device this long (zero: no such limit, as on hardware
    /// NICs, which pipeline). So it is on Soft-RoCE under emulation, where the NIC is kernel
    /// software on the VM's CPUs: with four requests outstanding each takes about as long as
    /// one alone (`loco bench ops --outstanding 1,4`), and a request not waited for still
    /// costs its time. For a put; `rxe` sets it to the put's idle round trip less the CPU's
    /// post and poll.
    pub device_put: Duration,
    /// As [`Profile::device_put`], for a get.
    pub device_get: Duration,
    /// As [`Profile::device_put`], for a remote FAA or CAS.
    pub device_rmw: Duration,
    /// Whether the device time of a request ([`Profile::device_put`] and its siblings) is spent
    /// on the posting thread's CPU, inside the post, instead of on a device of its own. So it
    /// is on Soft-RoCE: the post is a system call that runs the requester, the loop-back to the
    /// target, the responder and the completion before it returns (22 µs of a 24 µs put +
    /// wait is in the post on the VM), so a request needs a CPU ([`Profile::cpus`]) for its
    /// whole device time and the CPUs are the device's lanes. The request's NIC steps fall due
    /// as the table at the top of this module says, counted from the post, and the post
    /// returns once its device time is over. With it, [`Profile::device_lanes`] and
    /// [`Profile::spin_share`] are unused: a thread spinning or waiting for a CPU takes device
    /// time by holding or wanting a CPU. `rxe`: true; `connectx5`: false (hardware NICs work
    /// on their own).
    pub device_on_cpu: bool,
    /// How many requests the device of [`Profile::device_put`] works on at once, each
    /// thread's one after the other; 1 to 1024 (other values are taken as the nearest).
    /// Unused under [`Profile::device_on_cpu`], where the CPUs are the lanes.
    pub device_lanes: usize,
    /// The share of a device lane that a thread spinning on local memory, or waiting for a
    /// CPU ([`Profile::cpus`]), takes (0 to 1; other finite values are taken as the nearest,
    /// and a NaN or infinite one fails a run as
    /// [`FailureKind::Setup`](super::FailureKind::Setup)). Where the NIC is software on the
    /// same CPUs as the threads (rxe in a VM: its lanes are the VM's vCPUs), a waiter spinning
    /// on its node's memory (a weak or strong lock's waiter) occupies a CPU the device needs,
    /// where one waiting in remote reads or CASes (a node lock's, a spinlock's) runs device
    /// work itself; and a thread ready to run but without a CPU competes with the kernel's NIC
    /// work for one. With `s` such threads when a request starts, the device has
    /// `max(1, lanes - spin_share × s)` lanes' worth of time, and the request holds it
    /// `lanes / that` times longer; 0 (no effect) for hardware NICs. Unused under
    /// [`Profile::device_on_cpu`], where spinning and waiting threads take device time by
    /// holding or wanting a CPU (`rxe` keeps 1, a spinning thread taking a whole vCPU, for a
    /// profile built from it with the device off the CPUs; docs/simulation.md §3).
    pub spin_share: f64,
    /// From an unpark until the parked thread runs again (the OS's wake-up: the futex, the
    /// scheduler, a context switch). A thread parks where it waits for a thread of its own node
    /// ([`crate::clock::park_timeout`]; the cohorts of `loco-locks` park the waiters not next
    /// in line, and the one next in line after a short spin).
    ///
    /// With [`Profile::unpark`] it decides who comes first after a local handover: when an
    /// unpark costs the waker at least `wake`, the woken thread looks before the waker can come
    /// back for the lock (as on the VM, where a cohort's next thread takes the hold and the
    /// previous holder queues behind it); when it costs less, the waker may take an open hold
    /// first (barging, as on a host with idle cores). `rxe`: 100 µs, `connectx5`: 3 µs
    /// (docs/simulation.md §3).
    pub wake: Duration,
    /// What unparking a parked thread costs the thread that unparks it (the system call; an
    /// unpark of a thread that is not parked costs nothing). `rxe`: 400 µs, fitted to the lock
    /// benchmark on the VM (the futex call alone measured 35-110 µs in the profile's units: the
    /// fit also charges what the woken thread's return costs the VM's CPUs; docs/simulation.md
    /// §3, "The device on the CPUs"); `connectx5`: 1 µs.
    pub unpark: Duration,
    /// The host's CPUs that the simulated threads share; 0: every thread has a CPU of its own
    /// (`connectx5`: a host with a core per thread). With fewer CPUs than threads ready to
    /// run, a thread waits for a CPU before its next step, first come, first served; a thread
    /// lets go of its CPU when it parks, sleeps or joins, at a spin loop's pause when another
    /// thread waits for a CPU (loco's waits back off into `yield_now`), and when its
    /// [`Profile::slice`] is over and another waits. A thread polling a completion queue keeps
    /// its CPU (the verbs backend's polls spin first). `rxe`: 2, the VM's vCPUs (8 threads
    /// there are time-sliced, and a lock holder can lose its vCPU to a spinning waiter).
    pub cpus: usize,
    /// With [`Profile::cpus`]: how long a thread keeps a CPU that another thread waits for
    /// (the OS's time slice). Not scaled by [`Profile::scaled`] (it is the OS's, in real time).
    pub slice: Duration,
    /// With [`Profile::cpus`]: what a thread pays when it gets a CPU another thread let go of
    /// (the OS's context switch). `rxe`: 60 µs, of the order of the VM's measured wake-ups.
    pub switch: Duration,
    /// With [`Profile::cpus`]: how long a thread polls for a completion before it yields its
    /// CPU to a thread waiting for one (the verbs backend spins 500 µs, then yields).
    pub poll_spin: Duration,
}

impl Profile {
    /// A ConnectX-5 class RoCE/InfiniBand NIC, 100 Gb/s, two hosts through one switch.
    ///
    /// The values are not measured by us; they are chosen so that the model's round trips land
    /// where published measurements of this class of hardware put them: perftest's
    /// `ib_read_lat` and `ib_atomic_lat` about 2 µs for a full round trip, `ib_write_lat` about
    /// 1 µs for half of one; a NIC's DMA read of a payload (the reason small puts are sent
    /// inline) about 0.3-0.5 µs, and doorbells and PCIe round trips as analysed by Kalia,
    /// Kaminsky and Andersen, *Design Guidelines for High Performance RDMA Systems* (USENIX
    /// ATC 2016); remote atomics on one address serialised at a few million per second per NIC
    /// (the same paper; also the CAS-lock baselines of ShiftLock, FAST 2025); message rates of
    /// tens of millions per second per NIC. See [`Profile::predict_put`] and its siblings for
    /// the resulting round trips.
    pub fn connectx5() -> Self {
        Profile {
            name: "connectx5".into(),
            wire: Duration::from_nanos(600),
            loopback: Duration::from_nanos(200),
            nic: Duration::from_nanos(150),
            doorbell: Duration::from_nanos(150),
            pcie_read: Duration::from_nanos(350),
            pcie_write: Duration::from_nanos(150),
            read_response: Duration::ZERO,
            atomic: Duration::from_nanos(300),
            inbound_gap: Duration::from_nanos(15),
            outbound_gap: Duration::from_nanos(15),
            cpu_op: Duration::from_nanos(5),
            cpu_rmw: Duration::from_nanos(20),
            post: Duration::from_nanos(60),
            poll: Duration::from_nanos(40),
            pause: Duration::from_nanos(30),
            spin_hint: Duration::from_nanos(40),
            jitter: 0.05,
            device_put: Duration::ZERO,
            device_get: Duration::ZERO,
            device_rmw: Duration::ZERO,
            device_on_cpu: false,
            device_lanes: 1,
            spin_share: 0.0,
            wake: Duration::from_micros(3),
            unpark: Duration::from_micros(1),
            cpus: 0,
            slice: Duration::from_millis(3),
            switch: Duration::from_micros(2),
            poll_spin: Duration::from_micros(500),
        }
    }

    /// Soft-RoCE (the kernel's `rdma_rxe`) in this project's qemu VM (`soft-roce-ci/`), under
    /// emulation: every NIC step is kernel software, and the VM has no hardware acceleration.
    /// Calibrated against `soft-roce-ci/bench.sh` (put/get/rfaa + wait, full round trips) on
    /// the VM; `docs/simulation.md` has the calibration table. Queue pairs of one VM all loop
    /// back through one device, so `loopback` equals `wire`.
    pub fn rxe() -> Self {
        Profile {
            name: "rxe".into(),
            wire: Duration::from_nanos(31_500),
            loopback: Duration::from_nanos(31_500),
            nic: Duration::from_micros(8),
            doorbell: Duration::from_micros(8),
            pcie_read: Duration::from_micros(2),
            pcie_write: Duration::from_micros(2),
            read_response: Duration::from_nanos(79_500),
            atomic: Duration::from_nanos(8_500),
            inbound_gap: Duration::from_micros(3),
            outbound_gap: Duration::from_micros(3),
            cpu_op: Duration::from_nanos(20),
            cpu_rmw: Duration::from_nanos(80),
            post: Duration::from_micros(2),
            poll: Duration::from_micros(1),
            pause: Duration::from_nanos(200),
            spin_hint: Duration::from_nanos(500),
            jitter: 0.05,
            device_put: Duration::from_micros(91),
            device_get: Duration::from_nanos(160_500),
            device_rmw: Duration::from_nanos(89_500),
            device_on_cpu: true,
            device_lanes: 2,
            spin_share: 1.0,
            wake: Duration::from_micros(100),
            unpark: Duration::from_micros(400),
            cpus: 2,
            slice: Duration::from_millis(3),
            switch: Duration::from_micros(60),
            poll_spin: Duration::from_micros(500),
        }
    }

    /// The profile with every cost multiplied by `factor` (jitter unchanged): how to fit a
    /// profile to a faster or slower host, e.g. `rxe` to a VM that runs at a different speed
    /// (measure `soft-roce-ci/bench.sh` there and scale by the ratio of round trips).
    /// A negative or NaN factor makes every cost zero; costs saturate at `Duration::MAX`.
    pub fn scaled(self, factor: f64) -> Self {
        let f = |d: Duration| mul_saturating(d, factor);
        Profile {
            name: self.name,
            wire: f(self.wire),
            loopback: f(self.loopback),
            nic: f(self.nic),
            doorbell: f(self.doorbell),
            pcie_read: f(self.pcie_read),
            pcie_write: f(self.pcie_write),
            read_response: f(self.read_response),
            atomic: f(self.atomic),
            inbound_gap: f(self.inbound_gap),
            outbound_gap: f(self.outbound_gap),
            cpu_op: f(self.cpu_op),
            cpu_rmw: f(self.cpu_rmw),
            post: f(self.post),
            poll: f(self.poll),
            pause: f(self.pause),
            spin_hint: f(self.spin_hint),
            jitter: self.jitter,
            device_put: f(self.device_put),
            device_get: f(self.device_get),
            device_rmw: f(self.device_rmw),
            device_on_cpu: self.device_on_cpu,
            device_lanes: self.device_lanes,
            spin_share: self.spin_share,
            wake: f(self.wake),
            unpark: f(self.unpark),
            cpus: self.cpus,
            slice: self.slice,
            switch: f(self.switch),
            poll_spin: self.poll_spin,
        }
    }

    /// A profile by name: `connectx5` or `rxe`.
    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "connectx5" | "cx5" => Some(Self::connectx5()),
            "rxe" | "soft-roce" => Some(Self::rxe()),
            _ => None,
        }
    }

    /// The names [`Profile::by_name`] knows.
    pub const NAMES: [&'static str; 2] = ["connectx5", "rxe"];

    /// The round trip of an idle 8-byte `put` + `wait` between two nodes, without jitter: from
    /// the post until the wait has its completion.
    pub fn predict_put(&self) -> Duration {
        sum(&[
            self.post,
            self.doorbell,
            self.pcie_read,
            self.nic,
            self.wire,
            self.wire,
            self.nic,
            self.pcie_write,
            self.poll,
        ])
    }

    /// The round trip of an idle 8-byte `get` + `wait` between two nodes, without jitter.
    pub fn predict_get(&self) -> Duration {
        self.predict_fetch(self.read_response)
    }

    /// The round trip of an idle remote FAA (or CAS) + `wait`, without jitter.
    pub fn predict_rmw(&self) -> Duration {
        self.predict_fetch(self.atomic)
    }

    /// The cheaper read for a global fence under this profile: a remote CAS where an idle rCAS
    /// round trip is shorter than a get's (`rxe`, as on the Soft-RoCE device it mirrors), else
    /// a get (`connectx5`). What [`Config::fence_read`](super::Config::fence_read) defaults to.
    pub fn fence_read(&self) -> crate::FenceRead {
        if self.predict_rmw() < self.predict_get() {
            crate::FenceRead::Cas
        } else {
            crate::FenceRead::Get
        }
    }

    /// A request that fetches a word back (a get or an RMW), `at_target` being its work at the
    /// target's NIC.
    fn predict_fetch(&self, at_target: Duration) -> Duration {
        sum(&[
            self.post,
            self.doorbell,
            self.wire,
            self.wire,
            self.nic,
            at_target,
            self.pcie_write,
            self.poll,
        ])
    }
}

/// The sum of `ds`, saturating at `Duration::MAX`.
fn sum(ds: &[Duration]) -> Duration {
    ds.iter().fold(Duration::ZERO, |a, &d| a.saturating_add(d))
}

/// `d × factor`, saturating at `Duration::MAX`; zero for a negative or NaN factor (a profile's
/// value is the user's: nothing here may panic on it).
pub(crate) fn mul_saturating(d: Duration, factor: f64) -> Duration {
    if factor.is_nan() || factor <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(d.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

impl Default for Profile {
    fn default() -> Self {
        Self::connectx5()
    }
}
