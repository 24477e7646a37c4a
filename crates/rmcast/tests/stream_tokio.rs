//! The async (tokio) stream endpoints on loopback (127.0.0.1, TTL 1): one
//! async sender, two async receivers, every message whole, in order, once.
//! Runs with `cargo test -p rmcast --features tokio`.
#![cfg(feature = "tokio")]

use rmcast::stream::{
    Admission, AsyncStreamReceiver, AsyncStreamSender, GroupKey, StreamRecvConfig, StreamSendConfig,
};
use std::sync::Arc;
use std::time::Duration;

fn messages(count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let len = (i * 7919) % 9000;
            (0..len).map(|j| (i * 31 + j) as u8).collect()
        })
        .collect()
}

#[test]
fn async_endpoints_carry_a_stream_in_order() {
    carry(None);
}

#[test]
fn async_endpoints_carry_a_sealed_stream_in_order() {
    carry(Some(Arc::new(GroupKey::from_secret([3; 32]))));
}

fn carry(key: Option<Arc<GroupKey>>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let group = rmcast::random_group();
    let msgs = messages(300);
    let expected = msgs.clone();
    rt.block_on(async move {
        let mut readers = Vec::new();
        for _ in 0..2 {
            let mut cfg = StreamRecvConfig {
                group,
                connect_timeout: Some(Duration::from_secs(20)),
                group_key: key.clone(),
                ..StreamRecvConfig::default()
            };
            cfg.proto.linger = Duration::from_millis(300);
            let mut r = AsyncStreamReceiver::open(cfg).await.expect("open receiver");
            readers.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(m) = r.read().await.expect("read") {
                    got.push(m);
                }
                let report = r.finish().await.expect("finish");
                (got, report.complete)
            }));
        }
        let mut cfg = StreamSendConfig {
            group,
            wanted: Some(2),
            group_key: key.clone(),
            ..StreamSendConfig::default()
        };
        cfg.proto.admission = Admission::Announce {
            duration: Duration::from_secs(20),
            interval: Duration::from_millis(50),
            receivers_max: 2,
        };
        let mut s = AsyncStreamSender::open(cfg).await.expect("open sender");
        assert_eq!(
            s.wait_established(Some(Duration::from_secs(20)))
                .await
                .unwrap(),
            Some(2)
        );
        for m in msgs {
            s.send(m).await.expect("send");
        }
        let report = s.close().await.expect("close");
        assert!(report.ok, "{report:?}");
        assert_eq!(report.stats.auth.sealed > 0, key.is_some());
        for r in readers {
            let (got, complete) = tokio::time::timeout(Duration::from_secs(30), r)
                .await
                .expect("a receiver hung")
                .unwrap();
            assert!(complete);
            assert!(got == expected, "messages differ");
        }
    });
}
