//! A user-mode machine that hosts every hotkern subsystem.
