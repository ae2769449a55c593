use super::*;

fn tree(entries: &[(&str, u8)]) -> Vec<u8> {
    let mut t = Vec::new();
    for (name, id) in entries {
        t.extend_from_slice(b"100644 ");
        t.extend_from_slice(name.as_bytes());
        t.push(0);
        t.extend_from_slice(&[*id; 20]);
    }
    t
}

fn commit(sha: &str, date: &str) -> Arc<CommitInfo> {
    Arc::new(CommitInfo {
        sha: sha.into(),
        author: "A".into(),
        date: date.into(),
        subject: format!("subject of {sha}"),
        replaced_by: (sha == "c3").then(|| "NEW_KEY".into()),
    })
}

/// The saved history reads back as the history it was made of: each file's changes, in
/// order, with their commits whole, a commit shared by files written once; a change naming
/// a commit the cache does not hold makes the cache unusable instead of dropping it.
#[test]
fn the_saved_history_reads_back_whole() {
    let (c1, c2, c3) = (
        commit("c1", "2024-01-01T00:00:00Z"),
        commit("c2", "2024-01-02T00:00:00Z"),
        commit("c3", "2024-01-03T00:00:00Z"),
    );
    let change = |kind, commit: &Arc<CommitInfo>| Change {
        kind,
        commit: commit.clone(),
    };
    let history = History {
        files: BTreeMap::from([
            (
                "A.yaml".to_string(),
                vec![
                    change(ChangeKind::Deleted, &c3),
                    change(ChangeKind::Modified, &c2),
                    change(ChangeKind::Added, &c1),
                ],
            ),
            ("B.yaml".to_string(), vec![change(ChangeKind::Added, &c1)]),
            ("C.yaml".to_string(), vec![change(ChangeKind::Added, &c2)]),
        ]),
        partial: true,
        ..Default::default()
    };
    let out = CacheOut::of(&history, "c3", "catalogue".into());
    assert_eq!(out.commits.len(), 3, "each commit once");
    let bytes = serde_json::to_vec(&out).unwrap();
    let known = serde_json::from_slice::<Cache>(&bytes)
        .unwrap()
        .known()
        .expect("a whole cache is usable");
    assert_eq!(known.files, history.files);
    assert_eq!(
        (known.rel.as_str(), known.head.as_str()),
        ("catalogue", "c3")
    );
    assert!(known.partial);

    let mut text: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    text["files"]["B.yaml"][0][1] = 3.into();
    let broken: Cache = serde_json::from_value(text.clone()).unwrap();
    assert!(broken.known().is_none(), "a commit the cache does not hold");
    text["files"]["B.yaml"][0][1] = 0.into();
    text["version"] = 1.into();
    let older: Cache = serde_json::from_value(text).unwrap();
    assert!(older.known().is_none(), "another version");
}

#[test]
fn diff_finds_adds_edits_and_deletes_anywhere() {
    let before = tree(&[("A.yaml", 1), ("B.yaml", 2), ("C.yaml", 3), ("E.yaml", 5)]);
    let now = tree(&[
        ("A.yaml", 1),
        ("B.yaml", 9),
        ("D.yaml", 4),
        ("E.yaml", 5),
        ("F.yaml", 6),
    ]);
    let mut out = Vec::new();
    diff(&now, &before, (None, None), Default::default(), &mut out);
    out.sort();
    assert_eq!(
        out,
        vec![
            ("B.yaml".to_string(), ChangeKind::Modified),
            ("C.yaml".to_string(), ChangeKind::Deleted),
            ("D.yaml".to_string(), ChangeKind::Added),
            ("F.yaml".to_string(), ChangeKind::Added),
        ]
    );
    let mut out = Vec::new();
    diff(&before, &before, (None, None), Default::default(), &mut out);
    assert!(out.is_empty());
    diff(&before, &[], (None, None), Default::default(), &mut out);
    assert_eq!(out.len(), 4);
}

#[test]
fn diff_with_ids_that_share_bytes_with_names() {
    // The changed id's first byte equals the next name's first byte: boundaries still hold.
    let before = tree(&[("AA.yaml", b'B'), ("BB.yaml", 7)]);
    let now = tree(&[("AA.yaml", b'C'), ("BB.yaml", 7)]);
    let mut out = Vec::new();
    diff(&now, &before, (None, None), Default::default(), &mut out);
    assert_eq!(out, vec![("AA.yaml".to_string(), ChangeKind::Modified)]);
}

/// A long run of random edits, adds and deletes, diffed as the walker does (each tree's
/// marks carried from its last diff, in either direction): always what a whole parse finds.
#[test]
fn diff_with_carried_marks_matches_whole_parses() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let build = |rows: &BTreeMap<String, u8>| {
        let mut t = Vec::new();
        for (name, id) in rows {
            t.extend_from_slice(b"100644 ");
            t.extend_from_slice(name.as_bytes());
            t.push(0);
            // Ids full of NULs and name-like bytes, to tempt the hop.
            t.extend_from_slice(&[
                *id, 0, b'1', 0, b' ', *id, 0, 0, b'A', 0, 7, 0, 0, 1, 0, *id, 0, 2, 0, 0,
            ]);
        }
        t
    };
    let mut rows: BTreeMap<String, u8> = (0..400)
        .map(|i| (format!("R{:05}.yaml", i * 7), (i % 250) as u8))
        .collect();
    let mut before = build(&rows);
    let mut marks: Option<Marks> = None;
    for step in 0..600 {
        for _ in 0..1 + next(3) {
            let key = format!("R{:05}.yaml", next(4000));
            match next(3) {
                0 => {
                    rows.remove(&key);
                }
                _ => {
                    rows.insert(key, next(250) as u8);
                }
            }
        }
        let now = build(&rows);
        // What a delta between the two could say they share: any part of each common
        // end, the two ends possibly overlapping.
        let (p, q) = (common_prefix(&now, &before), common_suffix(&now, &before));
        let shared = pack::Shared {
            prefix: next(p as u64 + 1) as usize,
            suffix: next(q as u64 + 1) as usize,
        };
        let (mut fast, mut whole) = (Vec::new(), Vec::new());
        diff_whole(&now, &before, &mut whole);
        // Alternate which side brings the marks, as the two walk directions do.
        let (m_now, m_before) = if step % 2 == 0 {
            diff(&now, &before, (None, marks.as_deref()), shared, &mut fast)
        } else {
            let (b, a) = diff(
                &before,
                &now,
                (marks.as_deref(), None),
                shared,
                &mut Vec::new(),
            );
            diff(&now, &before, (Some(&a), Some(&b)), shared, &mut fast);
            (a, b)
        };
        fast.sort();
        whole.sort();
        assert_eq!(fast, whole, "step {step}");
        for m in [&m_now, &m_before] {
            assert!(m.windows(2).all(|w| w[0] < w[1]));
        }
        let starts: std::collections::HashSet<usize> = entries_between(&now, 0, now.len())
            .0
            .iter()
            .map(|e| e.0)
            .collect();
        assert!(
            m_now.iter().all(|m| starts.contains(m)),
            "step {step}: a mark off an entry"
        );
        marks = Some(m_now);
        before = now;
    }
}
