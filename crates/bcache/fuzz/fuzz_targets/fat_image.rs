//! Any bytes as a FAT image — raw, or as patches and a truncation applied
//! to a valid image — must mount and walk to Ok or a typed error, never a
//! panic or a hang.
#![no_main]

use std::sync::OnceLock;

use hotkern_bcache::image::ImageBuilder;
use hotkern_bcache::{CacheKind, FatType, FatVolume, MemoryDevice};
use libfuzzer_sys::fuzz_target;

fn template() -> &'static [u8] {
    static TEMPLATE: OnceLock<Vec<u8>> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let mut image = ImageBuilder::new(256 << 10, Some(FatType::Fat12)).expect("format");
        for i in 0..6u8 {
            let name = format!("dir{}/a-long-file-name-{i}.txt", i % 2);
            image
                .add_file(&name, &vec![i; 700 * usize::from(i)])
                .expect("write");
        }
        image.finish()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut image = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        let mut image = template().to_vec();
        let (cut, patches) = rest.split_at(rest.len().min(2));
        for patch in patches.chunks_exact(3) {
            let at = usize::from(u16::from_le_bytes([patch[0], patch[1]])) % image.len();
            image[at] = patch[2];
        }
        if cut.len() == 2 && mode & 2 != 0 {
            let keep = usize::from(u16::from_le_bytes([cut[0], cut[1]])) * 8;
            image.truncate(keep.max(1));
        }
        image
    };
    image.resize(image.len().next_multiple_of(512).max(512), 0);
    let kind = CacheKind::ALL[usize::from(mode / 4) % 4];
    let Ok(disk) = MemoryDevice::new(image, 512) else {
        return;
    };
    let mut cache = kind.build(disk, 16 << 10);
    if let Ok(mut volume) = FatVolume::mount(&mut cache) {
        let _ = volume.walk("/", 512, |_, _| {});
        let _ = volume.read_file("dir1/a-long-file-name-3.txt", 100);
    }
});
