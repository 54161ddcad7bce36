/**
 * A dashboard query as Grafana sends it to ClickHouse: template variables interpolated first (by
 * Grafana), then the ClickHouse data source plugin's macros expanded (by its backend). The macro
 * expansions are facts carried over from grafana/clickhouse-datasource `pkg/macros/macros.go`:
 *   $__timeFilter(c)    -> c >= toDateTime(<from s>) AND c <= toDateTime(<to s>)
 *   $__timeFilter_ms(c) -> c >= fromUnixTimestamp64Milli(<from ms>) AND c <= fromUnixTimestamp64Milli(<to ms>)
 *   $__timeInterval(c)  -> toStartOfInterval(toDateTime(c), INTERVAL <max(interval s, 1)> second)
 *   $__fromTime / $__toTime -> toDateTime(<s>);  $__interval_s -> <max(interval s, 1)>
 * A macro the plugin does not have is an error, as it is in Grafana.
 */
export interface GrafanaQueryContext {
  readonly from: Date;
  readonly to: Date;
  readonly intervalSeconds: number;
  /** Variable name -> selected values (an "All" selection is every option's value). */
  readonly variables: Readonly<Record<string, readonly string[]>>;
}

function interpolateVariables(sql: string, variables: GrafanaQueryContext['variables']): string {
  return sql.replace(/\$\{(\w+)(?::(\w+))?\}|\$(?!__)(\w+)/g, (whole, braced: string | undefined, format: string | undefined, bare: string | undefined) => {
    const name = braced ?? bare!;
    const values = variables[name];
    if (values === undefined) throw new Error(`dashboard variable ${name} is not defined (in ${whole})`);
    switch (format ?? 'csv') {
      case 'csv':
        return values.join(',');
      case 'singlequote':
        return values.map((value) => `'${value.replace(/'/g, "\\'")}'`).join(',');
      default:
        throw new Error(`variable format ${format} is not handled here`);
    }
  });
}

function macroArguments(sql: string, open: number): { args: string[]; end: number } {
  let depth = 0;
  for (let index = open; index < sql.length; index++) {
    if (sql[index] === '(') depth++;
    if (sql[index] === ')') depth--;
    if (depth === 0)
      return {
        args: sql
          .slice(open + 1, index)
          .split(',')
          .map((arg) => arg.trim()),
        end: index + 1,
      };
  }
  throw new Error(`unbalanced parentheses after ${sql.slice(0, open)}`);
}

export function expandGrafanaQuery(sql: string, context: GrafanaQueryContext): string {
  const from = Math.floor(context.from.getTime() / 1000);
  const to = Math.floor(context.to.getTime() / 1000);
  const interval = Math.max(Math.floor(context.intervalSeconds), 1);
  const withArgument: Record<string, (column: string) => string> = {
    timeFilter: (column) => `${column} >= toDateTime(${from}) AND ${column} <= toDateTime(${to})`,
    timeFilter_ms: (column) =>
      `${column} >= fromUnixTimestamp64Milli(${context.from.getTime()}) AND ${column} <= fromUnixTimestamp64Milli(${context.to.getTime()})`,
    timeInterval: (column) => `toStartOfInterval(toDateTime(${column}), INTERVAL ${interval} second)`,
  };
  const bare: Record<string, string> = {
    fromTime: `toDateTime(${from})`,
    toTime: `toDateTime(${to})`,
    interval_s: String(interval),
  };

  let text = interpolateVariables(sql, context.variables);
  let output = '';
  for (;;) {
    const match = /\$__(\w+)/.exec(text);
    if (match === null) return output + text;
    const name = match[1];
    output += text.slice(0, match.index);
    let rest = match.index + match[0].length;
    if (name in withArgument) {
      const { args, end } = macroArguments(text, rest);
      if (args.length !== 1) throw new Error(`$__${name} takes one argument, got ${args.length}`);
      output += withArgument[name](args[0]);
      rest = end;
    } else if (name in bare) {
      if (text[rest] === '(' && text[rest + 1] === ')') rest += 2;
      output += bare[name];
    } else {
      throw new Error(`$__${name} is not a macro of the ClickHouse data source`);
    }
    text = text.slice(rest);
  }
}
