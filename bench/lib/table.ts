/** Rows of cells as aligned columns (two spaces apart), the first row being the header. */
export function printTable(rows: readonly (readonly string[])[]): void {
  const widths = rows[0].map((_, column) => Math.max(...rows.map((row) => row[column].length)));
  for (const row of rows)
    console.log(
      row
        .map((cell, column) => cell.padEnd(widths[column]))
        .join('  ')
        .trimEnd(),
    );
}
