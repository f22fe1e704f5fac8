use railcoll_tests::{cluster, pattern};

#[test]
fn two_ranks_put() {
    let c = cluster(2, 1, 2, 1 << 20);
    let out = c.run(|comm| {
        let buf = comm.alloc(10_000).unwrap();
        let ev = comm.alloc_dest_event().unwrap();
        if comm.rank() == 0 {
            comm.write_local(&buf, 0, &pattern(10_000, 1)).unwrap();
            comm.put_with(
                &buf,
                1,
                &buf,
                railcoll_host::TransferOptions {
                    policy: None,
                    dest_event: Some(ev),
                },
            )
            .unwrap()
            .wait()
            .unwrap();
            Vec::new()
        } else {
            let arr = comm.expected_arrivals(comm.config().policy, 0, 1, 10_000, 1);
            comm.wait_arrivals(&ev, &arr).unwrap();
            let mut v = vec![0; 10_000];
            comm.read_local(&buf, 0, &mut v).unwrap();
            v
        }
    });
    let v = out.into_iter().nth(1).unwrap().unwrap();
    assert_eq!(v, pattern(10_000, 1));
}
