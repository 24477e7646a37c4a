//! The application beside each receiver machine: what it was delivered,
//! checked packet by packet against the sender's object (no copy is kept
//! per receiver), the hash of what it holds, and the packets it finds
//! held on "disk" (resume and delta).

use super::*;

/// Records a delivered chunk, checking it is new, aligned, a whole packet
/// and the object's bytes there (the object is the sender's: no copy is
/// kept per receiver).
pub(super) fn deliver(app: &mut RxApp, object: &[u8], chunk: DataChunk<'_>) -> Result<(), String> {
    if app.payload_size == 0 {
        return Err(format!(
            "data delivered at offset {} before any offer",
            chunk.offset
        ));
    }
    if !chunk.offset.is_multiple_of(app.payload_size) {
        return Err(format!("chunk at unaligned offset {}", chunk.offset));
    }
    let index = chunk.offset / app.payload_size;
    let (word, bit) = ((index / 64) as usize, index % 64);
    let start = chunk.offset as usize;
    let end = start + chunk.bytes.len();
    if word >= app.delivered.len() || index >= u64::from(app.packets) || end as u64 > app.size {
        return Err(format!("chunk {}..{} lies outside the object", start, end));
    }
    if app.delivered[word] & (1 << bit) != 0 {
        return Err(format!(
            "packet {index} (bytes {start}..{end}) delivered twice"
        ));
    }
    // A short or long chunk is as wrong as a wrong byte: the bitmap says
    // "this packet is held", so the chunk must be all of it.
    let packet_end = (chunk.offset + app.payload_size).min(app.size) as usize;
    if end != packet_end || chunk.bytes != &object[start..end] {
        app.all_matched = false;
        return Err(format!(
            "packet {index} (bytes {start}..{end}) delivered with wrong bytes"
        ));
    }
    app.delivered[word] |= 1 << bit;
    app.delivered_count += 1;
    Ok(())
}

/// The simulator's storage as a receiver that keeps no copy of its data
/// reads it back ([`rmcast_proto::ReadBack`], `fec_read_back`): a packet
/// the application was delivered is the object's bytes there, since each
/// delivery was checked against them; anything else (not delivered, not a
/// whole packet) cannot be read, and the machine must never ask for it.
pub(super) struct Stored<'a> {
    pub(super) app: &'a RxApp,
    pub(super) object: &'a [u8],
}

impl rmcast_proto::ReadBack for Stored<'_> {
    fn read_back(&mut self, offset: u64, dst: &mut [u8]) -> bool {
        let app = self.app;
        if app.payload_size == 0 || !offset.is_multiple_of(app.payload_size) {
            return false;
        }
        let index = offset / app.payload_size;
        let end = offset + dst.len() as u64;
        let whole = end == (offset + app.payload_size).min(app.size);
        let held = u32::try_from(index).is_ok_and(|i| i < app.packets && has(&app.delivered, i));
        if !whole || !held {
            return false;
        }
        dst.copy_from_slice(&self.object[offset as usize..end as usize]);
        true
    }
}

fn has(delivered: &[u64], i: u32) -> bool {
    delivered[(i / 64) as usize] & (1 << (i % 64)) != 0
}

/// Whether the application holds the whole object: every packet delivered,
/// each equal to the object's bytes.
pub(super) fn holds_object(app: &RxApp) -> bool {
    app.all_matched && app.delivered_count == app.packets
}

/// BLAKE3 of what the application holds: the object's bytes where a packet
/// was delivered, zeros elsewhere. When it holds the whole object that is
/// the object's hash, computed once per sender (`object_hash`); only an
/// incomplete or wrong receiver pays for hashing its bytes.
pub(super) fn received_hash(app: &RxApp, object: &[u8], object_hash: [u8; 32]) -> [u8; 32] {
    if holds_object(app) {
        return object_hash;
    }
    if !app.all_matched {
        // A wrong chunk ends the run before this, but the verdict must fail
        // whatever comes after one: a hash that is not the object's.
        let mut wrong = object_hash;
        wrong[0] ^= 0xff;
        return wrong;
    }
    let mut bytes = vec![0u8; app.size as usize];
    for i in 0..app.packets {
        if has(&app.delivered, i) {
            let start = (u64::from(i) * app.payload_size) as usize;
            let end = (start + app.payload_size as usize).min(bytes.len());
            bytes[start..end].copy_from_slice(&object[start..end]);
        }
    }
    *blake3::hash(&bytes).as_bytes()
}

/// Resume and delta: once the application holds every packet before the
/// barrier, it "finds" its held packets: marks them delivered (the machine
/// must never deliver them again; their bytes are the object's, on "disk")
/// and returns them to report.
pub(super) fn held_now(app: &mut RxApp, object: &[u8]) -> Option<Vec<(u32, u32)>> {
    let (barrier, _) = app.held.as_ref()?;
    let barrier = *barrier;
    // The delivered prefix only grows: each packet is looked at once, not
    // the whole prefix after every delivery. A barrier past the last packet
    // is never met.
    while app.prefix < barrier && app.prefix < app.packets && has(&app.delivered, app.prefix) {
        app.prefix += 1;
    }
    if app.prefix < barrier {
        return None;
    }
    let ranges = app.held.as_ref()?.1.clone();
    for &(first, count) in &ranges {
        for i in first..first + count {
            let start = u64::from(i) * app.payload_size;
            if start >= object.len() as u64 || has(&app.delivered, i) {
                continue;
            }
            app.delivered[(i / 64) as usize] |= 1 << (i % 64);
            app.delivered_count += 1;
        }
    }
    Some(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An application offered `size` bytes in packets of 10.
    fn offered(size: u64) -> RxApp {
        let packets = size.div_ceil(10) as u32;
        RxApp {
            delivered: vec![0; (packets as usize).div_ceil(64)],
            packets,
            size,
            payload_size: 10,
            all_matched: true,
            ..RxApp::default()
        }
    }

    fn chunk(object: &[u8], offset: u64, len: usize) -> DataChunk<'_> {
        DataChunk {
            offset,
            bytes: &object[offset as usize..offset as usize + len],
        }
    }

    #[test]
    fn every_packet_delivered_once_holds_the_object_and_hashes_as_it() {
        let object: Vec<u8> = (0..95u8).collect();
        let hash = *blake3::hash(&object).as_bytes();
        let mut app = offered(95);
        for i in 0..9 {
            assert!(!holds_object(&app));
            deliver(&mut app, &object, chunk(&object, i * 10, 10)).unwrap();
        }
        deliver(&mut app, &object, chunk(&object, 90, 5)).unwrap();
        assert!(holds_object(&app));
        assert_eq!(received_hash(&app, &object, hash), hash);
    }

    #[test]
    fn an_incomplete_receiver_hashes_its_bytes_with_zeros_for_the_gaps() {
        let object: Vec<u8> = (1..=30u8).collect();
        let hash = *blake3::hash(&object).as_bytes();
        let mut app = offered(30);
        deliver(&mut app, &object, chunk(&object, 0, 10)).unwrap();
        deliver(&mut app, &object, chunk(&object, 20, 10)).unwrap();
        let mut held = object.clone();
        held[10..20].fill(0);
        assert_eq!(
            received_hash(&app, &object, hash),
            *blake3::hash(&held).as_bytes()
        );
    }

    #[test]
    fn wrong_short_twice_or_outside_chunks_are_refused() {
        let object: Vec<u8> = (0..30u8).collect();
        let hash = *blake3::hash(&object).as_bytes();
        let mut app = offered(30);
        deliver(&mut app, &object, chunk(&object, 0, 10)).unwrap();
        let twice = deliver(&mut app, &object, chunk(&object, 0, 10)).unwrap_err();
        assert!(twice.contains("twice"), "{twice}");
        let outside = deliver(
            &mut app,
            &object,
            DataChunk {
                offset: 30,
                bytes: &[0; 10],
            },
        )
        .unwrap_err();
        assert!(outside.contains("outside"), "{outside}");
        let short = deliver(&mut app, &object, chunk(&object, 10, 9)).unwrap_err();
        assert!(short.contains("wrong bytes"), "{short}");
        let mut bad = object[20..30].to_vec();
        bad[3] ^= 1;
        let wrong = deliver(
            &mut app,
            &object,
            DataChunk {
                offset: 20,
                bytes: &bad,
            },
        )
        .unwrap_err();
        assert!(wrong.contains("wrong bytes"), "{wrong}");
        // Even if the rest arrived, a wrong chunk spoils the verdict.
        deliver(&mut app, &object, chunk(&object, 10, 10)).unwrap();
        deliver(&mut app, &object, chunk(&object, 20, 10)).unwrap();
        assert!(!holds_object(&app));
        assert_ne!(received_hash(&app, &object, hash), hash);
    }

    #[test]
    fn held_packets_count_once_the_barrier_is_reached() {
        let object = vec![5u8; 60];
        let mut app = offered(60);
        app.held = Some((2, vec![(4, 2)]));
        deliver(&mut app, &object, chunk(&object, 10, 10)).unwrap();
        assert!(held_now(&mut app, &object).is_none());
        deliver(&mut app, &object, chunk(&object, 0, 10)).unwrap();
        assert_eq!(held_now(&mut app, &object), Some(vec![(4, 2)]));
        deliver(&mut app, &object, chunk(&object, 20, 10)).unwrap();
        deliver(&mut app, &object, chunk(&object, 30, 10)).unwrap();
        assert!(holds_object(&app));
        let again = deliver(&mut app, &object, chunk(&object, 40, 10)).unwrap_err();
        assert!(again.contains("twice"), "{again}");
    }
}
