//! Putting a used instance back as it was when fresh, so calls need not
//! pay for a new one (issue 36: a fresh instance per call cost 3.4x a
//! reused one).
//!
//! A call's outcome must be a function of (module, params, state, input,
//! log time) only (`wasm.rs`), so every call must find the instance as
//! instantiation left it. An instance's state is: its linear memories
//! (bytes and size), its mutable globals, its tables, and which of its
//! passive segments were dropped. A module none of whose instructions can
//! change a table or drop a segment (`resettable`) changes only the first
//! two, and those the host can put back, if it can reach them: the module
//! is rewritten to export every memory and mutable global it defines
//! (`RESET_EXPORT_PREFIX`; exports change no instruction, so neither fuel
//! nor results, though the compiler may treat exported globals less
//! freely). After instantiation (its start function run) the host
//! takes an `Image` of them; after each call it writes the image back. A
//! call that grew a memory leaves an instance that cannot be put back (a
//! memory does not shrink): it is dropped, and the next call gets a fresh
//! one.
//!
//! Bound: an image holds at most `IMAGE_BYTES_MAX` of memory (a copy per
//! call; past it a fresh instance is cheaper).

use wasm_encoder::{ExportKind, ExportSection, RawSection};
use wasmparser::{Export, ExternalKind, Operator, Parser, Payload};
use wasmtime::{AsContextMut, Extern, Global, Instance, Memory, Mutability, Val};

/// The names under which the rewritten module exports what a reset writes
/// back (`<prefix>memory.<index>`, `<prefix>global.<index>`).
const RESET_EXPORT_PREFIX: &str = "tern.reset.";
/// Memory an image may hold: each call compares it, and copies back what changed.
/// (4 pages of 64 KiB: comparing more costs about what a new instance does.)
pub(super) const IMAGE_BYTES_MAX: usize = 256 << 10;
/// The unit a write back compares and copies.
const PAGE_BYTES: usize = 4096;

/// A module rewritten for reset, and what its instances export for it.
pub(super) struct Resettable {
    /// The module's bytes with the reset exports added.
    pub(super) bytes: Vec<u8>,
    /// Export names of the memories and the mutable globals.
    pub(super) memories: Vec<String>,
    pub(super) globals: Vec<String>,
}

/// `module`, rewritten to export what a reset writes back, if its
/// instances can be reset (no instruction changes a table or drops a
/// segment, and no export already uses the reset names); None if not
/// (every call then gets a fresh instance). The module (binary, or text)
/// was validated.
pub(super) fn resettable(module: &[u8]) -> Result<Option<Resettable>, String> {
    let module = &*wat::parse_bytes(module).map_err(|e| e.to_string())?;
    let mut imported_globals = 0;
    let mut memories = 0;
    let mut mutable_globals = Vec::new();
    let mut exports: Option<(std::ops::Range<usize>, Vec<Export>)> = None;
    for payload in Parser::new(0).parse_all(module) {
        match payload.map_err(|e| e.to_string())? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(|e| e.to_string())?;
                    match import.ty {
                        wasmparser::TypeRef::Global(_) => imported_globals += 1,
                        // Imported memories (none link: Tern provides functions only) are not the instance's own.
                        wasmparser::TypeRef::Memory(_) => return Ok(None),
                        _ => {}
                    }
                }
            }
            Payload::MemorySection(reader) => memories += reader.count(),
            Payload::GlobalSection(reader) => {
                for (at, global) in reader.into_iter().enumerate() {
                    if global.map_err(|e| e.to_string())?.ty.mutable {
                        mutable_globals.push(imported_globals + at as u32);
                    }
                }
            }
            Payload::ExportSection(reader) => {
                let range = reader.range();
                let list = reader.into_iter().collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
                exports = Some((range, list));
            }
            Payload::CodeSectionEntry(body) => {
                let mut operators = body.get_operators_reader().map_err(|e| e.to_string())?;
                while !operators.eof() {
                    if changes_more_than_memory_and_globals(&operators.read().map_err(|e| e.to_string())?) {
                        return Ok(None);
                    }
                }
            }
            _ => {}
        }
    }
    let Some((range, existing)) = exports else { return Ok(None) };
    if existing.iter().any(|export| export.name.starts_with(RESET_EXPORT_PREFIX)) {
        return Ok(None);
    }
    let memories: Vec<String> = (0..memories).map(|at| format!("{RESET_EXPORT_PREFIX}memory.{at}")).collect();
    let globals: Vec<String> = mutable_globals.iter().map(|at| format!("{RESET_EXPORT_PREFIX}global.{at}")).collect();
    let mut section = ExportSection::new();
    for export in &existing {
        section.export(export.name, export_kind(export.kind)?, export.index);
    }
    for (at, name) in memories.iter().enumerate() {
        section.export(name, ExportKind::Memory, at as u32);
    }
    for (index, name) in mutable_globals.iter().zip(&globals) {
        section.export(name, ExportKind::Global, *index);
    }
    Ok(Some(Resettable { bytes: with_section_replaced(module, range, &section)?, memories, globals }))
}

/// Whether an instruction changes an instance's state other than its
/// memories' bytes and sizes and its globals.
fn changes_more_than_memory_and_globals(operator: &Operator) -> bool {
    matches!(
        operator,
        Operator::TableSet { .. }
            | Operator::TableGrow { .. }
            | Operator::TableFill { .. }
            | Operator::TableCopy { .. }
            | Operator::TableInit { .. }
            | Operator::ElemDrop { .. }
            | Operator::DataDrop { .. }
    )
}

fn export_kind(kind: ExternalKind) -> Result<ExportKind, String> {
    Ok(match kind {
        ExternalKind::Func => ExportKind::Func,
        ExternalKind::Table => ExportKind::Table,
        ExternalKind::Memory => ExportKind::Memory,
        ExternalKind::Global => ExportKind::Global,
        ExternalKind::Tag => ExportKind::Tag,
        other => return Err(format!("an export of kind {other:?} is not supported")),
    })
}

/// `module` with the section at `range` (its contents, the export
/// section's) replaced by `section`; every other section copied as it is.
fn with_section_replaced(module: &[u8], range: std::ops::Range<usize>, section: &ExportSection) -> Result<Vec<u8>, String> {
    let mut out = wasm_encoder::Module::new();
    for payload in Parser::new(0).parse_all(module) {
        let payload = payload.map_err(|e| e.to_string())?;
        let Some((id, at)) = payload.as_section() else { continue };
        if at == range {
            out.section(section);
        } else {
            out.section(&RawSection { id, data: &module[at] });
        }
    }
    Ok(out.finish())
}

/// What a fresh instance's memories and mutable globals held.
pub(super) struct Image {
    memories: Vec<(Memory, Vec<u8>)>,
    globals: Vec<(Global, Val)>,
}

impl Image {
    /// The image of `instance`, just instantiated; None if it exports not
    /// what `reset` said, or holds more memory than `IMAGE_BYTES_MAX`.
    pub(super) fn of(mut store: impl AsContextMut, instance: &Instance, reset: &Resettable) -> Option<Image> {
        let mut memories = Vec::with_capacity(reset.memories.len());
        let mut bytes_total = 0;
        for name in &reset.memories {
            let Some(Extern::Memory(memory)) = instance.get_export(&mut store, name) else { return None };
            let data = memory.data(&store);
            bytes_total += data.len();
            if bytes_total > IMAGE_BYTES_MAX {
                return None;
            }
            memories.push((memory, data.to_vec()));
        }
        let mut globals = Vec::with_capacity(reset.globals.len());
        for name in &reset.globals {
            let Some(Extern::Global(global)) = instance.get_export(&mut store, name) else { return None };
            if global.ty(&store).mutability() != Mutability::Var {
                return None;
            }
            globals.push((global, global.get(&mut store)));
        }
        Some(Image { memories, globals })
    }

    /// Writes the image back; false if it cannot be (a memory grew), and
    /// the instance must then be dropped.
    pub(super) fn write_back(&self, mut store: impl AsContextMut) -> bool {
        for (memory, bytes) in &self.memories {
            let data = memory.data_mut(&mut store);
            if data.len() != bytes.len() {
                return false;
            }
            // Only the pages a call changed (most of a memory is not
            // written by a call: comparing costs less than writing).
            for (now, was) in data.chunks_mut(PAGE_BYTES).zip(bytes.chunks(PAGE_BYTES)) {
                if now != was {
                    now.copy_from_slice(was);
                }
            }
        }
        for (global, value) in &self.globals {
            if global.set(&mut store, *value).is_err() {
                return false;
            }
        }
        true
    }
}

/// The reset export names in use (for tests: none clash).
#[cfg(test)]
pub(super) fn names(reset: &Resettable) -> std::collections::HashSet<&str> {
    reset.memories.iter().chain(&reset.globals).map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn module(wat: &str) -> Vec<u8> {
        wat::parse_str(wat).unwrap()
    }

    #[test]
    fn a_module_is_rewritten_to_export_its_memory_and_mutable_globals() {
        let bytes = module(
            r#"(module (global $a (mut i32) (i32.const 1)) (global $b i32 (i32.const 2)) (global $c (mut i64) (i64.const 3))
               (memory (export "memory") 1) (func (export "f") (global.set $a (i32.const 5))))"#,
        );
        let reset = resettable(&bytes).unwrap().expect("resettable");
        assert_eq!(names(&reset), HashSet::from(["tern.reset.memory.0", "tern.reset.global.0", "tern.reset.global.2"]));
        wasmparser::Validator::new().validate_all(&reset.bytes).expect("the rewritten module is valid");
        let exports: Vec<String> = Parser::new(0)
            .parse_all(&reset.bytes)
            .filter_map(|p| match p.unwrap() {
                Payload::ExportSection(r) => Some(r.into_iter().map(|e| e.unwrap().name.to_string()).collect::<Vec<_>>()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(exports, ["memory", "f", "tern.reset.memory.0", "tern.reset.global.0", "tern.reset.global.2"]);
    }

    /// A call changes a mutable global (exported or not) and memory; after
    /// the write back, the instance answers as a fresh one. A call that grew
    /// the memory leaves one that cannot be written back.
    #[test]
    fn an_image_written_back_leaves_the_instance_as_fresh() {
        let bytes = module(
            r#"(module (global $hidden (mut i32) (i32.const 7)) (memory (export "memory") 1) (data (i32.const 8) "\05")
               (func (export "step") (result i32)
                 (global.set $hidden (i32.add (global.get $hidden) (i32.const 1)))
                 (i32.store8 (i32.const 8) (i32.add (i32.load8_u (i32.const 8)) (i32.const 1)))
                 (i32.add (global.get $hidden) (i32.load8_u (i32.const 8))))
               (func (export "grow") (drop (memory.grow (i32.const 1)))))"#,
        );
        let reset = resettable(&bytes).unwrap().expect("resettable");
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, &reset.bytes).unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let step = instance.get_typed_func::<(), i32>(&mut store, "step").unwrap();
        let image = Image::of(&mut store, &instance, &reset).expect("an image");
        let first = step.call(&mut store, ()).unwrap();
        assert_eq!(first, 8 + 6);
        assert_eq!(step.call(&mut store, ()).unwrap(), 9 + 7, "without a reset the call sees its history");
        assert!(image.write_back(&mut store));
        assert_eq!(step.call(&mut store, ()).unwrap(), first, "written back: as fresh");
        instance.get_typed_func::<(), ()>(&mut store, "grow").unwrap().call(&mut store, ()).unwrap();
        assert!(!image.write_back(&mut store), "a grown memory cannot be written back");
    }

    #[test]
    fn a_module_that_changes_tables_or_drops_segments_is_not_resettable() {
        for body in [
            "(table.set $t (i32.const 0) (ref.null func))",
            "(drop (table.grow $t (ref.null func) (i32.const 1)))",
            "(data.drop $d)",
            "(elem.drop $e)",
        ] {
            let bytes = module(&format!(
                r#"(module (table $t 1 funcref) (memory (export "memory") 1) (data $d "x") (elem $e func $f)
                   (func $f (export "f") {body}))"#
            ));
            assert!(resettable(&bytes).unwrap().is_none(), "{body}");
        }
    }

    #[test]
    fn a_module_whose_exports_use_the_reset_names_is_not_resettable() {
        let bytes = module(r#"(module (memory (export "memory") 1) (global (export "tern.reset.global.0") (mut i32) (i32.const 0)))"#);
        assert!(resettable(&bytes).unwrap().is_none());
    }
}
