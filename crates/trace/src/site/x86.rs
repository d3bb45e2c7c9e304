//! The bytes of a call site in each of its forms, and of the out-of-line
//! load and branch its compiled form jumps to (layout in the
//! [module documentation](super)).

/// Bytes of a site: one instruction in every form.
pub(crate) const LEN: usize = 5;
/// Bytes of a site's out-of-line load and branch.
pub(crate) const STUB_LEN: usize = 18;

/// `nopl 0x0(%rax,%rax,1)`: the 5-byte NOP (Linux's `BYTES_NOP5`).
const NOP5: [u8; LEN] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
/// `jmp rel32`.
const JMP: u8 = 0xe9;

/// What a call site's text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// As compiled: a jump to the out-of-line load of the enable word
    /// and branch to the slow path.
    Compiled,
    /// A NOP: the tracer costs nothing here.
    Nop,
    /// A jump to the slow path.
    Jump,
}

impl Form {
    pub(crate) fn code(self) -> u8 {
        match self {
            Form::Compiled => 0,
            Form::Nop => 1,
            Form::Jump => 2,
        }
    }

    pub(crate) fn from_code(code: u8) -> Form {
        match code {
            1 => Form::Nop,
            2 => Form::Jump,
            _ => Form::Compiled,
        }
    }
}

/// The little-endian `rel32` from the end of an instruction at `end` to
/// `to`. Sites, stubs, slow paths and descriptors lie in one image, within
/// ±2 GiB of each other (the linker would have refused the `.long`s
/// otherwise).
fn rel32(end: usize, to: usize) -> [u8; 4] {
    (to.wrapping_sub(end) as i32).to_le_bytes()
}

/// `jmp to` at `at`.
fn jump(at: usize, to: usize) -> [u8; LEN] {
    let rel = rel32(at + LEN, to);
    [JMP, rel[0], rel[1], rel[2], rel[3]]
}

/// The site at `code` in `form`: `target` is its slow path, `stub` its
/// out-of-line load and branch.
pub(crate) fn bytes(form: Form, code: usize, target: usize, stub: usize) -> [u8; LEN] {
    match form {
        Form::Compiled => jump(code, stub),
        Form::Nop => NOP5,
        Form::Jump => jump(code, target),
    }
}

/// The out-of-line load and branch at `stub` of the site at `code`:
/// `cmp dword [rip + word], 0; jne target; jmp code + 5` (`word` is the
/// address of the descriptor's enable word).
pub(crate) fn stub(stub: usize, code: usize, target: usize, word: usize) -> [u8; STUB_LEN] {
    let mut out = [0u8; STUB_LEN];
    out[..2].copy_from_slice(&[0x83, 0x3d]);
    out[2..6].copy_from_slice(&rel32(stub + 7, word));
    out[6] = 0x00;
    out[7..9].copy_from_slice(&[0x0f, 0x85]);
    out[9..13].copy_from_slice(&rel32(stub + 13, target));
    out[13..].copy_from_slice(&jump(stub + 13, code + LEN));
    out
}

/// Where a CPU that trapped on the breakpoint of a site becoming `to`
/// continues: where the new instruction would take it (Linux's
/// `poke_int3_handler` emulates the new instruction the same way).
pub(crate) fn resume(to: Form, code: usize, target: usize, stub: usize) -> usize {
    match to {
        Form::Jump => target,
        Form::Nop => code + LEN,
        Form::Compiled => stub,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_encode_as_the_layout_says() {
        let (code, target, stub) = (0x1000, 0x1040, 0x9000);
        assert_eq!(
            bytes(Form::Compiled, code, target, stub),
            [0xe9, 0xfb, 0x7f, 0, 0]
        );
        assert_eq!(bytes(Form::Jump, code, target, stub), [0xe9, 0x3b, 0, 0, 0]);
        assert_eq!(bytes(Form::Nop, code, target, stub), NOP5);
        // A slow path before the site: a negative displacement.
        assert_eq!(
            &bytes(Form::Jump, 0x1000, 0xff0, stub)[1..],
            &(-21i32).to_le_bytes()
        );
        // cmp dword [rip + 0x2000 - 0x9007], 0 ; jne 0x1040 ; jmp 0x1005
        let word = 0x2000;
        let mut expected = [
            0x83, 0x3d, 0, 0, 0, 0, 0, 0x0f, 0x85, 0, 0, 0, 0, 0xe9, 0, 0, 0, 0,
        ];
        expected[2..6].copy_from_slice(&(0x2000i32 - 0x9007).to_le_bytes());
        expected[9..13].copy_from_slice(&(0x1040i32 - 0x900d).to_le_bytes());
        expected[14..].copy_from_slice(&(0x1005i32 - 0x9012).to_le_bytes());
        assert_eq!(self::stub(stub, code, target, word), expected);
    }

    #[test]
    fn trapped_cpus_resume_where_the_new_instruction_goes() {
        assert_eq!(resume(Form::Jump, 100, 500, 900), 500);
        assert_eq!(resume(Form::Nop, 100, 500, 900), 105);
        assert_eq!(resume(Form::Compiled, 100, 500, 900), 900);
        for form in [Form::Compiled, Form::Nop, Form::Jump] {
            assert_eq!(Form::from_code(form.code()), form);
        }
    }
}
