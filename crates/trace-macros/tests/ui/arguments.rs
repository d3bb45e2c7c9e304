#[hotkern_trace::function(name = "other")]
fn read_block(n: u64) -> u64 {
    n * 2
}

fn main() {}
