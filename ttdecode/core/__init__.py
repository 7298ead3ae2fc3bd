"""The shared ground under the operators: the backend-neutral program description
(``program_description``), host tile tensors (``tensor``) and their byte formats (``formats``), the
chunk/piece/tree arithmetic the kernels mirror (``split``), the uniform argument error (``checks``) and
where the package's non-Python files live (``paths``). Nothing here imports an operator."""
