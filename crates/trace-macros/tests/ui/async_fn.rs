#[hotkern_trace::function]
async fn read_block(n: u64) -> u64 {
    n * 2
}

fn main() {}
