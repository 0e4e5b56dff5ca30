//! The MPI bootstrap's exchanges under `mpirun -n N` (`scripts/test-mpi.sh` runs it with 2
//! processes): all-gathers of every rank's own length, many rounds, and barriers, all through
//! MPI's non-blocking collectives polled against the bound. Needs the `mpi` feature; without
//! `mpirun` it runs as a world of one.
#![cfg(feature = "mpi")]

use purlin::bootstrap::{Bootstrap, Mpi};
use std::time::Duration;

#[test]
fn exchanges_of_every_length_and_barriers_are_bounded_and_exact() {
    let mpi = Mpi::init()
        .expect("MPI initializes")
        .with_timeout(Duration::from_secs(60));
    let (rank, world) = (mpi.rank() as usize, mpi.world() as usize);
    for round in 0..50usize {
        let len = |r: usize| (r * 7 + round) % 23;
        let mine: Vec<u8> = (0..len(rank))
            .map(|i| (rank * 31 + round + i) as u8)
            .collect();
        let all = mpi.all_gather(&mine).expect("the all-gather completes");
        assert_eq!(all.len(), world);
        for (r, got) in all.iter().enumerate() {
            let want: Vec<u8> = (0..len(r)).map(|i| (r * 31 + round + i) as u8).collect();
            assert_eq!(got, &want, "round {round}: rank {r}'s data");
        }
        mpi.barrier().expect("the barrier completes");
    }
    println!("rank {rank} of {world}: 50 bounded exchanges and barriers exact");
}
