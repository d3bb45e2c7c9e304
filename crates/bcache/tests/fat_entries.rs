//! Directory records patched by hand: long names must be used only when
//! their pieces form one intact set whose checksum matches the short entry
//! that follows, as the FAT specification asks; otherwise the 8.3 name
//! stands.

mod common;

use common::fat::{build, with_volume, TYPES};
use common::pattern;
use hotkern_bcache::FatType;

const LONG_NAME: &str = "a-long-file-name.txt";

/// Long-name records: sequence number (0x40 on the last piece), attribute
/// 0x0F at byte 11, the short entry's checksum at byte 13.
const ATTR_LONG_NAME: u8 = 0x0F;
const LAST_PIECE: u8 = 0x40;

/// Where the two long-name records of [`LONG_NAME`] (20 characters, 13 a
/// piece) start: the piece numbered 2 comes first on disk, then piece 1,
/// then the short entry.
fn long_name_records(image: &[u8]) -> usize {
    let found: Vec<usize> = (0..image.len() - 96)
        .step_by(32)
        .filter(|&at| {
            image[at] == LAST_PIECE | 2
                && image[at + 11] == ATTR_LONG_NAME
                && image[at + 32] == 1
                && image[at + 43] == ATTR_LONG_NAME
                && image[at + 75] != ATTR_LONG_NAME
        })
        .collect();
    assert_eq!(found.len(), 1);
    found[0]
}

/// The 8.3 name of a short entry, decoded by hand.
fn short_name(record: &[u8]) -> String {
    let trim = |part: &[u8]| String::from_utf8_lossy(part).trim_end().to_owned();
    let (base, extension) = (trim(&record[..8]), trim(&record[8..11]));
    if extension.is_empty() {
        base
    } else {
        format!("{base}.{extension}")
    }
}

/// The names `read_dir` gives the root's entries.
fn root_names(image: &[u8]) -> Vec<String> {
    with_volume(image, |volume| {
        let root = volume.root();
        let entries = volume.read_dir(&root).unwrap();
        entries.into_iter().map(|e| e.name).collect()
    })
}

fn image_with_a_long_name(fat_type: FatType) -> (Vec<u8>, usize) {
    let (image, _) = build(fat_type, &[(LONG_NAME, &pattern(100, 1))]);
    let at = long_name_records(&image);
    (image, at)
}

#[test]
fn an_intact_long_name_is_used() {
    for fat_type in TYPES {
        let (image, at) = image_with_a_long_name(fat_type);
        assert_eq!(root_names(&image), [LONG_NAME], "{fat_type:?}");
        let short = short_name(&image[at + 64..]);
        with_volume(&image, |volume| {
            let file = volume.lookup(&short).unwrap();
            assert_eq!(file.name, LONG_NAME);
            assert_eq!(file.short_name, short);
        });
    }
}

/// A tool unaware of long names renamed the short entry: the checksum in
/// the long-name records no longer matches, so the long name is stale.
#[test]
fn a_long_name_whose_checksum_does_not_match_the_short_entry_is_dropped() {
    for fat_type in TYPES {
        let (mut image, at) = image_with_a_long_name(fat_type);
        image[at + 64 + 1] = b'X';
        let short = short_name(&image[at + 64..]);
        assert!(short.starts_with("AX"), "{short}");
        assert_eq!(root_names(&image), [short], "{fat_type:?}");
    }
}

/// One piece of the set carries another checksum, or a sequence number
/// the first piece did not announce: the set is broken and the 8.3 name
/// stands (and nothing is written outside the name's pieces).
#[test]
fn a_broken_set_of_long_name_pieces_is_dropped() {
    for fat_type in TYPES {
        let (image, at) = image_with_a_long_name(fat_type);
        let short = short_name(&image[at + 64..]);
        let mut other_checksum = image.clone();
        other_checksum[at + 32 + 13] ^= 0x5A;
        assert_eq!(
            root_names(&other_checksum),
            vec![short.clone()],
            "{fat_type:?}"
        );
        let mut beyond = image.clone();
        beyond[at + 32] = 3;
        assert_eq!(root_names(&beyond), vec![short.clone()], "{fat_type:?}");
        // Without its first piece, the rest of the set means nothing.
        let mut headless = image.clone();
        headless[at] = 0xE5;
        assert_eq!(root_names(&headless), [short], "{fat_type:?}");
    }
}

/// A tool unaware of long names deleted the file (marking only its short
/// entry) and wrote a file of the same 8.3 name, without a long name, in
/// the next record: the deleted entry's long name must not pass to it,
/// though the checksum of the 8.3 name would match.
#[test]
fn a_long_name_does_not_pass_over_a_deleted_entry() {
    for fat_type in TYPES {
        let (mut image, at) = image_with_a_long_name(fat_type);
        let short_entry = at + 64;
        let next = short_entry + 32;
        assert!(
            image[next..next + 32].iter().all(|&b| b == 0),
            "a free record follows"
        );
        let record = image[short_entry..next].to_vec();
        image[next..next + 32].copy_from_slice(&record);
        image[short_entry] = 0xE5;
        assert_eq!(root_names(&image), [short_name(&record)], "{fat_type:?}");
    }
}
