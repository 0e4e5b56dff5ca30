//! Packet round trip on one GPU: how long a store by one SM takes to be seen by a thread of
//! another SM that polls for it, with the accesses Purlin's protocol uses. Two blocks of one
//! kernel play ping-pong through global memory `--rounds` times: block 0 stores round `i`,
//! block 1 waits until it sees `i` and stores it back, block 0 waits until it sees it; the
//! GPU's global timer over all rounds, divided by the rounds, is one round trip (two one-way
//! trips plus two polls). Two protocols:
//!
//! - `packet`: a 16-byte `st.volatile.global.v2.u64` polled by 16-byte `ld.volatile` loads, as
//!   the latency paths' packets (`purlin_device::snac::packet`);
//! - `signal`: an 8-byte `st.release.sys` polled by `ld.relaxed.sys` loads, as the throughput
//!   regime's signals (`purlin_device::snac::sync`).
//!
//! Every wait is bounded (about 2^24 polls): a round that never arrives fails the run.
//! Prints a Markdown table of medians over `--repeats` launches.

use clap::Parser;
use cudarc::driver::{LaunchConfig, PushKernelArg};
use purlin::Gpu;

#[derive(Parser, Debug)]
#[command(about = "Round trip of a packet and of a signal between two SMs of one GPU")]
struct Args {
    /// Round trips per launch.
    #[arg(long, default_value_t = 2000)]
    rounds: u32,
    /// Launches per protocol (the median is reported).
    #[arg(long, default_value_t = 7)]
    repeats: usize,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

/// The ping-pong kernel `name` with the store `store` of `%rd4` to `[{at}]` and the load
/// `load` of `[{at}]` into `%rd5` (the `{at}` register is substituted). Parameters: the
/// buffer (ping at byte 0, pong at byte 256), the rounds, and the output (`[0]`: block 0's
/// nanoseconds over all rounds, `[1]`: nonzero if a wait ran out).
fn kernel(name: &str, store: &str, load: &str) -> String {
    let (st_ping, st_pong) = (store.replace("{at}", "%rd1"), store.replace("{at}", "%rd3"));
    let wait_ping = bounded_wait("PONG_WAIT", &load.replace("{at}", "%rd1"));
    let wait_pong = bounded_wait("PING_WAIT", &load.replace("{at}", "%rd3"));
    format!(
        "
.visible .entry {name}(.param .u64 buf, .param .u32 rounds, .param .u64 out)
{{
    .reg .pred %p<5>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<16>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r1, [rounds];
    ld.param.u64 %rd2, [out];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    add.u64 %rd3, %rd1, 256;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %tid.x;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra DONE;
    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra PONG;
    mov.u64 %rd10, %globaltimer;
    mov.u32 %r4, 1;
PING_LOOP:
    setp.gt.u32 %p2, %r4, %r1;
    @%p2 bra PING_END;
    cvt.u64.u32 %rd4, %r4;
    {st_ping}
{wait_pong}    add.u32 %r4, %r4, 1;
    bra PING_LOOP;
PING_END:
    mov.u64 %rd11, %globaltimer;
    sub.u64 %rd12, %rd11, %rd10;
    st.global.u64 [%rd2], %rd12;
    bra DONE;
PONG:
    mov.u32 %r4, 1;
PONG_LOOP:
    setp.gt.u32 %p2, %r4, %r1;
    @%p2 bra DONE;
    cvt.u64.u32 %rd4, %r4;
{wait_ping}    {st_pong}
    add.u32 %r4, %r4, 1;
    bra PONG_LOOP;
FAIL:
    mov.u64 %rd13, 1;
    st.global.u64 [%rd2+8], %rd13;
DONE:
    ret;
}}
"
    )
}

/// The loop at `label` that loads with `load` until `%rd5` equals `%rd4`, leaving for `FAIL`
/// after 2^24 polls.
fn bounded_wait(label: &str, load: &str) -> String {
    format!(
        "    mov.u32 %r5, 0;
{label}:
    {load}
    add.u32 %r5, %r5, 1;
    setp.gt.u32 %p3, %r5, 16777216;
    @%p3 bra FAIL;
    setp.ne.u64 %p2, %rd5, %rd4;
    @%p2 bra {label};
"
    )
}

/// The protocols: name, kernel, store, load.
const PROTOCOLS: [(&str, &str, &str, &str); 2] = [
    (
        "packet (16-byte volatile store / volatile polls)",
        "purlin_ping_pong_packet",
        "st.volatile.global.v2.u64 [{at}], {%rd4, %rd4};",
        "ld.volatile.global.v2.u64 {%rd5, %rd6}, [{at}];",
    ),
    (
        "signal (8-byte st.release.sys / ld.relaxed.sys polls)",
        "purlin_ping_pong_signal",
        "st.release.sys.global.u64 [{at}], %rd4;",
        "ld.relaxed.sys.global.u64 %rd5, [{at}];",
    ),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.rounds == 0 || args.repeats == 0 {
        return Err("--rounds and --repeats must be at least 1".into());
    }
    let gpu = Gpu::open(args.device)?;
    let stream = gpu.new_stream()?;
    let mut ptx = String::from(".version 7.0\n.target sm_70\n.address_size 64\n");
    for (_, name, store, load) in PROTOCOLS {
        ptx += &kernel(name, store, load);
    }
    let module = stream
        .context()
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))?;
    let mut buf = stream.alloc_zeros::<u64>(64)?;
    let mut out = stream.alloc_zeros::<u64>(2)?;
    println!(
        "# {} ({} SMs): two blocks of one kernel, {} round trips per launch, median of {} launches",
        gpu.name(),
        gpu.sm_count(),
        args.rounds,
        args.repeats
    );
    println!("| protocol | round trip (ns) | one way incl. a poll (ns) |");
    println!("| --- | --- | --- |");
    for (label, name, _, _) in PROTOCOLS {
        let f = module.load_function(name)?;
        let mut trips = Vec::with_capacity(args.repeats);
        for _ in 0..args.repeats {
            stream.memset_zeros(&mut buf)?;
            stream.memset_zeros(&mut out)?;
            let cfg = LaunchConfig {
                grid_dim: (2, 1, 1),
                block_dim: (32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the kernel reads and writes `buf` (512 bytes, it uses 272) and `out`
            // (two u64), both live until the synchronise below; two blocks of a tiny kernel
            // are resident together, and every wait is bounded.
            unsafe {
                stream
                    .launch_builder(&f)
                    .arg(&buf)
                    .arg(&args.rounds)
                    .arg(&out)
                    .launch(cfg)
            }?;
            stream.synchronize()?;
            let got = stream.clone_dtoh(&out)?;
            if got[1] != 0 {
                return Err(
                    format!("{label}: a round never arrived (bounded wait ran out)").into(),
                );
            }
            trips.push(got[0] as f64 / args.rounds as f64);
        }
        trips.sort_by(f64::total_cmp);
        let median = trips[trips.len() / 2];
        println!("| {label} | {median:.0} | {:.0} |", median / 2.0);
    }
    Ok(())
}
