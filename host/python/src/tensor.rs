//! Tensors as the bindings see them: Python objects read through their attributes
//! (`data_ptr()`, `dtype`, `numel()`, `element_size()`, `is_contiguous()`, `device`), so the
//! module never links against libtorch and any object with those attributes works. Every check
//! a tensor can fail on its own is made here, with a message naming the argument.

use crate::error::{Result, type_error, value};
use purlin::DataType;
use purlin::memory::Span;
use pyo3::exceptions::PyAttributeError;
use pyo3::intern;
use pyo3::prelude::*;
use std::sync::Mutex;

/// Device addresses Purlin reads and writes with 16-byte vectors must be aligned to this.
pub const ALIGN: u64 = 16;

/// What a call needs of one tensor.
#[derive(Clone, Debug)]
pub struct Tensor {
    /// The argument's name in the Python signature (`in_tensor`, `out_tensor`).
    pub what: &'static str,
    /// `data_ptr()`: the device address of the first element.
    pub addr: u64,
    /// `numel()`.
    pub numel: u64,
    /// `element_size()`, in bytes.
    pub element_size: u64,
    /// The dtype, by name, and the element type Purlin reduces it as (if it can).
    pub dtype: Dtype,
}

/// A tensor's dtype.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dtype {
    /// `str(dtype)`, e.g. `torch.bfloat16`.
    pub name: String,
    /// The element type reductions use; `None` for dtypes only the copy collectives move.
    pub reducible: Option<DataType>,
}

impl Tensor {
    /// Bytes the tensor holds.
    pub fn bytes(&self) -> u64 {
        self.numel.saturating_mul(self.element_size)
    }

    /// The tensor's bytes as a span.
    pub fn span(&self) -> Span {
        Span::new(self.addr, self.bytes())
    }

    /// The element type a reduction runs in, or a `TypeError` naming the dtypes that work.
    pub fn reducible(&self, collective: &str) -> Result<DataType> {
        self.dtype.reducible.ok_or_else(|| {
            type_error(format!(
                "{collective} reduces torch.float32, torch.float16, torch.bfloat16, \
                 torch.float8_e4m3fn or torch.float8_e5m2; {} is {}",
                self.what, self.dtype.name
            ))
        })
    }

    /// A `ValueError` unless the data starts on a 16-byte boundary (empty tensors pass).
    pub fn check_aligned(&self) -> Result<()> {
        if self.numel > 0 && !self.addr.is_multiple_of(ALIGN) {
            return Err(value(format!(
                "{} starts at {:#x}, which is not {ALIGN}-byte aligned: Purlin moves 16-byte \
                 vectors, so pass a tensor whose data starts on a 16-byte boundary (a view at an \
                 odd offset is not; .clone() gives a fresh, aligned copy)",
                self.what, self.addr
            )));
        }
        Ok(())
    }
}

/// `a` and `b` must hold the same dtype.
pub fn check_same_dtype(a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(type_error(format!(
            "{} is {} but {} is {}: both must have the same dtype",
            a.what, a.dtype.name, b.what, b.dtype.name
        )));
    }
    Ok(())
}

/// The element type Purlin reduces a dtype named `name` as.
pub fn reducible_dtype(name: &str) -> Option<DataType> {
    match name {
        "torch.float32" => Some(DataType::F32),
        "torch.float16" => Some(DataType::F16),
        "torch.bfloat16" => Some(DataType::Bf16),
        "torch.float8_e4m3fn" => Some(DataType::E4m3),
        "torch.float8_e5m2" => Some(DataType::E5m2),
        _ => None,
    }
}

/// dtype objects seen so far, by address (each entry holds a reference, so an address is
/// never reused for another object): torch's dtypes are singletons, so after the first call
/// a dtype costs one lookup instead of a `str()`.
static DTYPES: Mutex<Vec<(usize, Py<PyAny>, Dtype)>> = Mutex::new(Vec::new());

/// At most this many dtype objects are remembered (torch has a few dozen dtypes).
const DTYPE_CACHE: usize = 64;

fn dtype_of(dtype: &Bound<'_, PyAny>) -> PyResult<Dtype> {
    let key = dtype.as_ptr() as usize;
    let mut cache = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, _, d)) = cache.iter().find(|(k, _, _)| *k == key) {
        return Ok(d.clone());
    }
    let name = dtype.str()?.to_string();
    let d = Dtype {
        reducible: reducible_dtype(&name),
        name,
    };
    if cache.len() < DTYPE_CACHE {
        cache.push((key, dtype.clone().unbind(), d.clone()));
    }
    Ok(d)
}

/// The Python type name of `obj`, for messages.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .qualname()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

/// `obj.name`, or a `TypeError` saying `what` must be a CUDA tensor.
fn attr<'py>(
    obj: &Bound<'py, PyAny>,
    name: &Bound<'py, pyo3::types::PyString>,
    what: &str,
) -> Result<Bound<'py, PyAny>> {
    obj.getattr(name).map_err(|e| {
        if e.is_instance_of::<PyAttributeError>(obj.py()) {
            type_error(format!(
                "{what} must be a torch.Tensor on a CUDA device, not {} (it has no `{name}`)",
                type_name(obj)
            ))
        } else {
            e.into()
        }
    })
}

/// A non-negative integer result of `obj.method()`.
fn call_u64(method: &Bound<'_, PyAny>, what: &str) -> Result<u64> {
    let r = method.call0()?;
    r.extract::<u64>().map_err(|_| {
        type_error(format!(
            "{what}: expected a non-negative int from {}, got {}",
            method.repr().map(|r| r.to_string()).unwrap_or_default(),
            type_name(&r)
        ))
    })
}

/// The device of a tensor: `Some(index)` for CUDA, `None` with its description otherwise.
fn device_of(obj: &Bound<'_, PyAny>, what: &str) -> Result<(Option<i64>, String)> {
    let py = obj.py();
    let device = attr(obj, intern!(py, "device"), what)?;
    let kind: String = device
        .getattr(intern!(py, "type"))
        .and_then(|t| t.extract())
        .map_err(|_| {
            type_error(format!(
                "{what}.device must be a torch.device, not {}",
                type_name(&device)
            ))
        })?;
    let index: Option<i64> = device
        .getattr(intern!(py, "index"))
        .and_then(|i| i.extract())
        .unwrap_or(None);
    let shown = device.str().map(|s| s.to_string()).unwrap_or(kind.clone());
    Ok(((kind == "cuda").then_some(index.unwrap_or(-1)), shown))
}

/// Reads and checks a tensor argument: a CUDA tensor of GPU `ordinal`, contiguous.
pub fn read(obj: &Bound<'_, PyAny>, what: &'static str, ordinal: usize) -> Result<Tensor> {
    let py = obj.py();
    if obj.is_none() || obj.is_instance_of::<pyo3::types::PyInt>() {
        return Err(type_error(format!(
            "{what} must be a torch.Tensor on a CUDA device, not {} (the original API takes \
             tensors here, not addresses)",
            type_name(obj)
        )));
    }
    let data_ptr = attr(obj, intern!(py, "data_ptr"), what)?;
    let (cuda, shown) = device_of(obj, what)?;
    match cuda {
        None => {
            return Err(value(format!(
                "{what} is on {shown}: Purlin's collectives run on CUDA tensors of the handle's \
                 device; move it with .to('cuda:{ordinal}')"
            )));
        }
        Some(index) if index >= 0 && index as usize != ordinal => {
            return Err(value(format!(
                "{what} is on cuda:{index}, but the handle was initialized on cuda:{ordinal}: \
                 pass tensors of the handle's device"
            )));
        }
        Some(_) => {}
    }
    let contiguous = attr(obj, intern!(py, "is_contiguous"), what)?.call0()?;
    if !contiguous.is_truthy()? {
        return Err(value(format!(
            "{what} is not contiguous: pass {what}.contiguous() (Purlin moves flat byte ranges)"
        )));
    }
    let dtype = dtype_of(&attr(obj, intern!(py, "dtype"), what)?)?;
    let element_size = call_u64(&attr(obj, intern!(py, "element_size"), what)?, what)?;
    let numel = call_u64(&attr(obj, intern!(py, "numel"), what)?, what)?;
    let addr = call_u64(&data_ptr, what)?;
    if element_size == 0 {
        return Err(value(format!("{what} reports an element size of 0 bytes")));
    }
    Ok(Tensor {
        what,
        addr,
        numel,
        element_size,
        dtype,
    })
}

/// The raw CUDA stream a call names: an int (`torch.cuda.Stream.cuda_stream`, what the
/// original API takes) or, as a convenience, any object with a `cuda_stream` int attribute.
pub fn stream_arg(obj: &Bound<'_, PyAny>) -> Result<u64> {
    let py = obj.py();
    let raw = if obj.is_instance_of::<pyo3::types::PyInt>() {
        obj.clone()
    } else {
        obj.getattr(intern!(py, "cuda_stream")).map_err(|_| {
            type_error(format!(
                "stream_ptr must be an int (a cudaStream_t such as \
                 torch.cuda.current_stream().cuda_stream), not {}",
                type_name(obj)
            ))
        })?
    };
    raw.extract::<u64>().map_err(|_| {
        value(format!(
            "stream_ptr must be a non-negative int (a cudaStream_t), got {}",
            raw.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

/// A list of non-negative byte counts (`bytes_list`, `splits`) of exactly `len` entries, each a
/// whole number of `element_size`-byte elements.
pub fn byte_counts(
    obj: &Bound<'_, PyAny>,
    what: &str,
    len: usize,
    element_size: u64,
    layout: &str,
) -> Result<Vec<u64>> {
    if obj.is_instance_of::<pyo3::types::PyString>() || obj.is_instance_of::<pyo3::types::PyBytes>()
    {
        return Err(type_error(format!("{what} must be a list of ints")));
    }
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| {
            type_error(format!(
                "{what} must be a list of ints, not {}",
                type_name(obj)
            ))
        })?
        .collect::<PyResult<_>>()?;
    if items.len() != len {
        return Err(value(format!(
            "{what} has {} entries; it needs {len}: {layout}",
            items.len()
        )));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let v: i64 = item.extract().map_err(|_| {
                type_error(format!(
                    "{what}[{i}] must be an int (a size in bytes), not {}",
                    type_name(item)
                ))
            })?;
            if v < 0 {
                return Err(value(format!(
                    "{what}[{i}] is {v}: sizes cannot be negative"
                )));
            }
            let v = v as u64;
            if !v.is_multiple_of(element_size) {
                return Err(value(format!(
                    "{what}[{i}] is {v} bytes, not a whole number of {element_size}-byte \
                     elements: sizes are in bytes of the tensors' dtype"
                )));
            }
            Ok(v)
        })
        .collect()
}
